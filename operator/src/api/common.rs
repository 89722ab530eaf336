//! Building blocks shared by the kinds: references, identities, durations, the
//! database target, the policy and the shaping of operation Jobs.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration,
};
use kube::KubeSchema;
use kube::core::{Message, Rule};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Regular expressions of the OpenAPI schema. Kept in one place so the CEL
/// rules, the docs and the tests read the same text.
pub mod pattern {
    /// A DNS-1123 subdomain: Kubernetes object names.
    pub const DNS_SUBDOMAIN: &str =
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    /// A DNS-1123 label: namespace names.
    pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    /// A key of a ConfigMap or Secret.
    pub const CONFIG_MAP_KEY: &str = r"^[-._a-zA-Z0-9]+$";
    /// A SHA-256 digest as the operator writes every digest.
    pub const SHA256_DIGEST: &str = r"^sha256:[0-9a-f]{64}$";
    /// An execution-binding epoch.
    pub const EXECUTION_EPOCH: &str = r"^v1-[0-9a-f]{32}$";
    /// A database engine name (known or not: unknown ones are reported, not refused).
    pub const ENGINE: &str = r"^[A-Za-z][A-Za-z0-9._-]*$";
    /// A coordination key.
    pub const COORDINATION_KEY: &str = r"^[a-z0-9]([a-z0-9._:/-]{0,251}[a-z0-9])?$";
    /// A Git commit id (SHA-1, 40 lowercase hex digits).
    pub const GIT_COMMIT: &str = r"^[0-9a-f]{40}$";
    /// A Git branch or tag name: no whitespace, no control characters, none of
    /// `~^:?*[\`, and no leading `-` (it would read as an option).
    pub const GIT_REF_NAME: &str = r"^[^-\s~^:?*\[\\\x00-\x1f\x7f][^\s~^:?*\[\\\x00-\x1f\x7f]*$";
    /// The URL schemes a Git source may use.
    pub const GIT_URL: &str = r"^(https?|ssh|git|file)://\S+$";
    /// An OCI reference: `oci://<registry>/<repository>` and then `:<tag>` or `@sha256:<digest>`.
    /// A tag or a digest is required: an implicit `latest` would move under
    /// the resource without the manifest saying so.
    pub const OCI_REF: &str =
        r"^oci://[^\s/?#]+/[^\s?#@:]+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[a-f0-9]{64})$";
    /// A SQLSTATE code.
    pub const SQLSTATE: &str = r"^[0-9A-Z]{5}$";
    /// A Go duration as CEL sees it (`ns`, `us`, `ms`, `s`, `m`, `h`).
    pub const GO_DURATION: &str = r"^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$";
    /// A list entry of `policy.exclude`: no surrounding whitespace, no control characters.
    pub const EXCLUDE_ENTRY: &str = r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$";
    /// A table name, optionally schema-qualified.
    pub const PROTECTED_TABLE: &str = r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$";
    /// A label value.
    pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
    /// A label or annotation key: `[prefix/]name`, name at most 63 characters.
    pub const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
}

/// The CEL rule that keeps a duration field parseable and inside its range.
///
/// `matches` guards `duration()`, so a malformed value fails this rule with
/// its message instead of a CEL evaluation error.
pub fn duration_rule(field: &str, min: &str, max: &str) -> Rule {
    Rule::new(format!(
        "self.matches('{re}') && duration(self) >= duration('{min}') && duration(self) <= duration('{max}')",
        re = pattern::GO_DURATION
    ))
    .message(Message::Message(format!(
        "{field} must be a duration such as 30s, 5m or 1h30m, from {min} to {max}"
    )))
}

/// A CEL expression that is true when `lhs` (a duration string) is at most
/// `secs` (an integer field, in seconds). Malformed durations pass here: their
/// own rule reports them. Both sides become instants after the epoch so that
/// a fraction (`60.5s` against 60) counts, which `getSeconds()` would drop,
/// without building a duration string (which costs too much for CEL).
pub(crate) fn duration_at_most_seconds(lhs: &str, secs: &str) -> String {
    format!(
        "!{lhs}.matches('{re}') || timestamp(0) + duration({lhs}) <= timestamp({secs})",
        re = pattern::GO_DURATION
    )
}

/// A duration as Go and Kubernetes write it (`30s`, `5m`, `1h30m`). The text
/// is kept as written, so a manifest reads back exactly as it was applied.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(transparent)]
pub struct GoDuration(String);

/// A duration that does not parse or is negative.
#[derive(Debug, thiserror::Error)]
#[error("{value:?} is not a non-negative Go duration: {reason}")]
pub struct DurationError {
    value: String,
    reason: String,
}

impl GoDuration {
    /// Wraps a duration string; [`GoDuration::to_std`] checks it.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The duration, refusing text Go would not parse and negative values.
    pub fn to_std(&self) -> Result<std::time::Duration, DurationError> {
        if self.0.is_empty() {
            return Err(DurationError {
                value: self.0.clone(),
                reason: "empty".into(),
            });
        }
        let parsed: kube::core::Duration =
            self.0
                .parse()
                .map_err(|e: kube::core::duration::ParseError| DurationError {
                    value: self.0.clone(),
                    reason: e.to_string(),
                })?;
        if parsed.is_negative() {
            return Err(DurationError {
                value: self.0.clone(),
                reason: "negative".into(),
            });
        }
        Ok(parsed.into())
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GoDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "maxLength": 32 })
    }
}

/// Names an object of the same namespace by name and UID. The UID defeats
/// delete-and-recreate: an object of the same name is another object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Name of the object.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// UID of the object (`metadata.uid`).
    #[schemars(length(min = 1, max = 128))]
    pub uid: String,
}

/// Names an object by name only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NameRef {
    /// Name of the object.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
}

/// Selects one key of a Secret in the resource's namespace. The manager never
/// reads it: the kubelet hands the value to the operation container only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.name) && size(self.name) > 0 && has(self.key) && size(self.key) > 0")
    .message("urlFrom must name a Secret (name) and the key in it that holds the database URL (key)"))]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// Key of the Secret whose value is the database URL.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY))]
    pub key: String,
}

/// Selects one key of a ConfigMap in the resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// Key of the ConfigMap (`data` or `binaryData`).
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY))]
    pub key: String,
}

/// Who did something, as the API server authenticated them; stamped by
/// admission, never taken from the client.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// User name of the authenticated request.
    #[schemars(length(min = 1, max = 256))]
    pub username: String,
    /// UID of the authenticated user, when the authenticator gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub uid: Option<String>,
    /// Groups of the authenticated user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 256)))]
    pub groups: Vec<String>,
}

/// The database engines the operator implements, as [`Target::engine`] is
/// read. Any other value is kept in the spec and reported `UnsupportedEngine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatabaseEngine {
    /// PostgreSQL.
    PostgreSQL,
    /// MySQL, and MariaDB, which speaks its protocol.
    MySQL,
}

impl DatabaseEngine {
    /// Reads `spec.target.engine`: `PostgreSQL`/`postgres`/`pgx` and
    /// `MySQL`/`MariaDB`, in any case. `None` for an engine the operator does
    /// not implement.
    pub fn from_spec(engine: &str) -> Option<Self> {
        match engine.to_ascii_lowercase().as_str() {
            "postgresql" | "postgres" | "pgx" => Some(Self::PostgreSQL),
            "mysql" | "mariadb" => Some(Self::MySQL),
            _ => None,
        }
    }

    /// The canonical spelling bound into digests.
    pub fn canonical(self) -> &'static str {
        match self {
            Self::PostgreSQL => "postgresql",
            Self::MySQL => "mysql",
        }
    }
}

/// The database a resource converges, and how it is coordinated with every
/// other resource that can reach the same physical database.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.coordinationKey) != has(self.realmRef)")
    .message("spec.target must set exactly one of coordinationKey or realmRef"))]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Database engine: `PostgreSQL` or `MySQL` (MariaDB is `MySQL`). Other
    /// values are accepted, so a GitOps repository can hold them, and reported
    /// `Blocked` with reason `UnsupportedEngine` until the spec changes.
    #[schemars(length(min = 1, max = 63), regex(pattern = pattern::ENGINE))]
    pub engine: String,
    /// The Secret key holding the database URL. The manager never reads it;
    /// only the operation container receives it, as `PTAH_DB_URL`.
    pub url_from: SecretKeyRef,
    /// Stable, non-secret name of the physical database within this namespace.
    /// Every resource of the namespace that can reach the same database, by any
    /// alias or credential, must use the same key. Exactly one of
    /// `coordinationKey` and `realmRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::COORDINATION_KEY))]
    pub coordination_key: Option<String>,
    /// A cluster-scoped PtahRealm that grants this namespace the database, for
    /// a database managed from several namespaces. Exactly one of
    /// `coordinationKey` and `realmRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm_ref: Option<NameRef>,
    /// This resource manages only part of the database and other claimants are
    /// intended. A realm claimed by more than one resource is refused unless
    /// every claimant sets it.
    #[serde(default)]
    pub shared_realm: bool,
}

/// A scratch database the schema Plan may use for comparisons.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevDatabase {
    /// The Secret key holding the scratch database URL; used by Plan only,
    /// never by Observe or Apply, and redacted like the target.
    pub url_from: SecretKeyRef,
}

/// When a current plan may run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApplyPolicy {
    /// Record plans and apply none.
    Never,
    /// Apply a plan once a person approved that exact plan.
    #[default]
    OnApproval,
    /// Apply every plan the policy allows without approval (a destructive or
    /// privilege-changing schema plan still asks for one).
    Always,
}

/// Which differences count as drift worth applying.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DriftSeverityPolicy {
    /// Every difference.
    #[default]
    All,
    /// Destructive differences only.
    Destructive,
}

/// How a schema Apply wraps statements in transactions.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SchemaTransactionMode {
    /// One transaction for the whole plan.
    All,
    /// One transaction per file.
    #[default]
    File,
    /// No transaction: each statement stands alone.
    None,
}

/// How a migration run wraps statements in transactions.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MigrationTransactionMode {
    /// One transaction per migration file.
    File,
    /// No transaction: each statement stands alone.
    None,
}

fn default_schema_lock_timeout() -> GoDuration {
    GoDuration::new("30s")
}

fn default_migration_lock_timeout() -> GoDuration {
    GoDuration::new("5m")
}

/// What a PtahSchema may apply, and how.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaPolicy {
    /// When a current plan may run: `Never`, `OnApproval` or `Always`.
    #[serde(default)]
    pub apply: ApplyPolicy,
    /// Permits destructive plans. A destructive plan also needs an approval,
    /// even under `Always`.
    #[serde(default)]
    pub allow_destructive: bool,
    /// Tables no plan may change (`table` or `schema.table`, matched without
    /// case). A plan that would change one is refused, with no override.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 128), regex(pattern = pattern::PROTECTED_TABLE)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub protected_tables: Vec<String>,
    /// Objects outside the managed scope, passed to Ptah's planning. Drift is
    /// still observed without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 256), regex(pattern = pattern::EXCLUDE_ENTRY)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub exclude: Vec<String>,
    /// Which differences count as drift worth applying: `all` or `destructive`.
    #[serde(default)]
    pub drift_severity: DriftSeverityPolicy,
    /// How long to wait for the database's own locks (1s to 10m).
    #[serde(default = "default_schema_lock_timeout")]
    #[x_kube(validation = duration_rule("spec.policy.lockTimeout", "1s", "10m"))]
    pub lock_timeout: GoDuration,
    /// Statement wrapping: `all`, `file` or `none`; an engine may refuse a mode.
    #[serde(default)]
    pub transaction_mode: SchemaTransactionMode,
}

impl Default for SchemaPolicy {
    fn default() -> Self {
        Self {
            apply: ApplyPolicy::default(),
            allow_destructive: false,
            protected_tables: Vec::new(),
            exclude: Vec::new(),
            drift_severity: DriftSeverityPolicy::default(),
            lock_timeout: default_schema_lock_timeout(),
            transaction_mode: SchemaTransactionMode::default(),
        }
    }
}

/// What a PtahMigration may apply, and how.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPolicy {
    /// When a current plan may run: `Never`, `OnApproval` or `Always`.
    /// Migration SQL is arbitrary, so `Always` applies every plan as published.
    #[serde(default)]
    pub apply: ApplyPolicy,
    /// How long to wait for the database's migration lock (1s to 1h); distinct
    /// from the Kubernetes Lease.
    #[serde(default = "default_migration_lock_timeout")]
    #[x_kube(validation = duration_rule("spec.policy.lockTimeout", "1s", "1h"))]
    pub lock_timeout: GoDuration,
    /// Statement wrapping: `file` or `none`; unset lets Ptah choose. Bound into
    /// the plan: editing it retires the plan and its approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_mode: Option<MigrationTransactionMode>,
}

impl Default for MigrationPolicy {
    fn default() -> Self {
        Self {
            apply: ApplyPolicy::default(),
            lock_timeout: default_migration_lock_timeout(),
            transaction_mode: None,
        }
    }
}

/// Label and annotation keys no Pod of an operation may be given: the
/// operator's own, Kubernetes' own (they steer the kubelet, admission and the
/// Job controller) and the Job controller's bare selector labels.
pub const RESERVED_POD_METADATA_RULE: &str = "self.all(k, !(k.startsWith('ptah.run/') || k.contains('.ptah.run/') || k.startsWith('kubernetes.io/') || k.contains('.kubernetes.io/') || k.startsWith('k8s.io/') || k.contains('.k8s.io/') || k == 'controller-uid' || k == 'job-name'))";

fn qualified_keys_rule() -> String {
    format!(
        "self.all(k, size(k) <= 317 && k.matches('{}'))",
        pattern::QUALIFIED_NAME
    )
}

fn label_map(schema: &mut Schema) {
    schema.insert("maxProperties".into(), json!(16));
    schema.insert(
        "additionalProperties".into(),
        json!({"type": "string", "maxLength": 63, "pattern": pattern::LABEL_VALUE}),
    );
}

fn annotation_map(schema: &mut Schema) {
    schema.insert("maxProperties".into(), json!(16));
    schema.insert(
        "additionalProperties".into(),
        json!({"type": "string", "maxLength": 1024}),
    );
}

fn node_selector_map(schema: &mut Schema) {
    schema.insert("maxProperties".into(), json!(64));
    schema.insert(
        "additionalProperties".into(),
        json!({"type": "string", "maxLength": 63}),
    );
}

/// Extra labels and annotations for the Pods of operations (a service mesh
/// opt-out, say). Not bound into plans: editing them keeps plans and approvals.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetadata {
    /// Labels added to operation Pods (at most 16). Keys under `ptah.run`,
    /// `kubernetes.io` or `k8s.io` (or a subdomain of them) and the bare keys
    /// `controller-uid` and `job-name` are reserved and refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = label_map)]
    #[x_kube(validation = Rule::new(RESERVED_POD_METADATA_RULE)
        .message("spec.execution.podMetadata.labels must not use a reserved key: prefixes ptah.run, kubernetes.io, k8s.io and their subdomains, controller-uid, job-name"))]
    #[x_kube(validation = Rule::new(qualified_keys_rule())
        .message("spec.execution.podMetadata.labels keys must be qualified names: [DNS subdomain/]name, name at most 63 characters"))]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to operation Pods (at most 16, values up to 1024
    /// characters), under the same reserved keys as `labels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = annotation_map)]
    #[x_kube(validation = Rule::new(RESERVED_POD_METADATA_RULE)
        .message("spec.execution.podMetadata.annotations must not use a reserved key: prefixes ptah.run, kubernetes.io, k8s.io and their subdomains, controller-uid, job-name"))]
    #[x_kube(validation = Rule::new(qualified_keys_rule())
        .message("spec.execution.podMetadata.annotations keys must be qualified names: [DNS subdomain/]name, name at most 63 characters"))]
    pub annotations: BTreeMap<String, String>,
}

fn default_failure_retry_interval() -> GoDuration {
    GoDuration::new("30s")
}

fn default_active_deadline_seconds() -> i64 {
    900
}

fn default_connect_timeout() -> GoDuration {
    GoDuration::new("10s")
}

/// How the Jobs of operations are shaped and scheduled. Editing these fields
/// does not retire a plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new(duration_at_most_seconds("self.connectTimeout", "self.activeDeadlineSeconds"))
    .message("spec.execution.connectTimeout must not exceed spec.execution.activeDeadlineSeconds")
    .field_path(".connectTimeout"))]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// Wait before a failed read is tried again, and before a Failed resource
    /// starts over (5s to 1h).
    #[serde(default = "default_failure_retry_interval")]
    #[x_kube(validation = duration_rule("spec.execution.failureRetryInterval", "5s", "1h"))]
    pub failure_retry_interval: GoDuration,
    /// Deadline of each operation Job, in seconds (30 to 86400). An Apply that
    /// reaches it has an unknown outcome and is never replayed.
    #[serde(default = "default_active_deadline_seconds")]
    #[schemars(range(min = 30, max = 86400))]
    pub active_deadline_seconds: i64,
    /// Bound on opening the database connection (1s to 10m, and no more than
    /// `activeDeadlineSeconds`).
    #[serde(default = "default_connect_timeout")]
    #[x_kube(validation = duration_rule("spec.execution.connectTimeout", "1s", "10m"))]
    pub connect_timeout: GoDuration,
    /// Compute resources of the container that runs Ptah.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Service account of operation Pods. It needs no Kubernetes permission;
    /// its token is not mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub service_account_name: Option<String>,
    /// Secrets for pulling the executor and runner images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Node labels operation Pods must be scheduled on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = node_selector_map)]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of operation Pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub tolerations: Vec<Toleration>,
    /// Affinity of operation Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Priority class of operation Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub priority_class_name: Option<String>,
    /// Runtime class of operation Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub runtime_class_name: Option<String>,
    /// Extra labels and annotations of operation Pods; reserved keys refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_metadata: Option<PodMetadata>,
}

impl Default for Execution {
    fn default() -> Self {
        Self {
            failure_retry_interval: default_failure_retry_interval(),
            active_deadline_seconds: default_active_deadline_seconds(),
            connect_timeout: default_connect_timeout(),
            resources: None,
            service_account_name: None,
            image_pull_secrets: Vec::new(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            priority_class_name: None,
            runtime_class_name: None,
            pod_metadata: None,
        }
    }
}

/// The default of `spec.interval`.
pub fn default_interval() -> GoDuration {
    GoDuration::new("10m")
}

/// The spec-level rule that keeps `policy.lockTimeout` within the Job deadline.
pub(crate) fn lock_timeout_rule() -> Rule {
    Rule::new(format!(
        "!has(self.policy) || !has(self.policy.lockTimeout) || !has(self.execution) || !has(self.execution.activeDeadlineSeconds) || {}",
        duration_at_most_seconds("self.policy.lockTimeout", "self.execution.activeDeadlineSeconds")
    ))
    .message("spec.policy.lockTimeout must not exceed spec.execution.activeDeadlineSeconds")
    .field_path(".policy.lockTimeout")
}

/// The root rule that keeps names short enough for Job labels.
pub(crate) fn name_length_rule() -> Rule {
    Rule::new("size(self.metadata.name) <= 63")
        .message("metadata.name must be at most 63 characters: it is carried whole into Job labels")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn durations_parse_as_go_writes_them() {
        assert_eq!(
            GoDuration::new("30s").to_std().ok(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            GoDuration::new("1h30m").to_std().ok(),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            GoDuration::new("1.5s").to_std().ok(),
            Some(Duration::from_millis(1500))
        );
        for bad in ["", "10", "ten minutes", "5x", "-5s"] {
            let err = GoDuration::new(bad).to_std().err();
            assert!(err.is_some(), "{bad:?} parsed");
            assert!(
                err.map(|e| e.to_string()).unwrap_or_default().contains(bad),
                "error names {bad:?}"
            );
        }
        // The text is kept as written.
        let d: GoDuration = serde_json::from_str("\"10m\"").expect("json");
        assert_eq!(serde_json::to_string(&d).expect("json"), "\"10m\"");
    }

    #[test]
    fn the_cel_duration_pattern_agrees_with_the_parser_on_common_spellings() {
        // The CEL rule and the Rust parser must accept the same manifests.
        let accepted = ["10s", "5m", "1h30m", "1.5s", "250ms", "24h"];
        let refused = ["10", "1d", "ten", "1h 30m", " 5s"];
        let re = |s: &str| {
            // A tiny matcher for the one pattern, so the test needs no regex crate.
            let mut rest = s;
            if rest.is_empty() {
                return false;
            }
            while !rest.is_empty() {
                let digits =
                    rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                if digits == 0 {
                    return false;
                }
                rest = &rest[digits..];
                if let Some(frac) = rest.strip_prefix('.') {
                    let d =
                        frac.len() - frac.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    if d == 0 {
                        return false;
                    }
                    rest = &frac[d..];
                }
                let unit = ["ns", "us", "ms", "s", "m", "h"]
                    .into_iter()
                    .find(|u| rest.starts_with(u));
                match unit {
                    Some(u) => rest = &rest[u.len()..],
                    None => return false,
                }
            }
            true
        };
        for s in accepted {
            assert!(re(s) && GoDuration::new(s).to_std().is_ok(), "{s}");
        }
        for s in refused {
            assert!(!re(s), "{s}");
        }
        assert_eq!(
            pattern::GO_DURATION,
            r"^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$"
        );
    }

    #[test]
    fn engines_are_read_without_case_and_mariadb_is_mysql() {
        assert_eq!(
            DatabaseEngine::from_spec("PostgreSQL"),
            Some(DatabaseEngine::PostgreSQL)
        );
        assert_eq!(
            DatabaseEngine::from_spec("postgres"),
            Some(DatabaseEngine::PostgreSQL)
        );
        assert_eq!(
            DatabaseEngine::from_spec("MariaDB"),
            Some(DatabaseEngine::MySQL)
        );
        assert_eq!(
            DatabaseEngine::from_spec("MySQL").map(DatabaseEngine::canonical),
            Some("mysql")
        );
        assert_eq!(DatabaseEngine::from_spec("Oracle"), None);
    }

    #[test]
    fn the_reserved_pod_metadata_rule_names_every_reserved_prefix() {
        for prefix in ["ptah.run/", "kubernetes.io/", "k8s.io/"] {
            assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k.startsWith('{prefix}')")));
            assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k.contains('.{prefix}')")));
        }
        for bare in ["controller-uid", "job-name"] {
            assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k == '{bare}'")));
        }
    }
}
