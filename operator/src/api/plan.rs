//! Stage 2, the plan: immutable objects the manager publishes. A schema plan
//! holds its bytes in chunks; a migration plan holds the ordered sequence of
//! versions and checksums, never SQL. Both bind plan contract version 2.

#![allow(
    clippy::duplicated_attributes,
    reason = "each printcolumn(...) of the kube derive repeats type_ = \"string\" by design"
)]

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{MigrationTransactionMode, ObjectRef, pattern};
use super::condition::{Condition, MigrationPlanConditionType, SchemaPlanConditionType};
use super::status::{ExecutionBinding, SourceBinding};

/// The plan contract this API binds: what a plan's fingerprint covers.
pub const PLAN_CONTRACT_VERSION: i32 = 2;
/// Largest plan, in bytes.
pub const PLAN_MAX_BYTES: i64 = 8 * 1024 * 1024;
/// Largest chunk, in bytes.
pub const CHUNK_MAX_BYTES: i64 = 512 * 1024;
/// Most chunks a plan has.
pub const PLAN_MAX_CHUNKS: usize = 16;

/// A kind of privilege change the operator's own reading of a plan found. Any
/// of them makes the plan ask for an approval, even under `Always`.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum PrivilegeChange {
    /// GRANT, ALTER DEFAULT PRIVILEGES … GRANT.
    Grant,
    /// REVOKE, DROP OWNED.
    Revoke,
    /// Role membership changes.
    RoleMembership,
    /// CREATE, ALTER or DROP of roles or users; SET ROLE.
    Role,
    /// OWNER TO, REASSIGN OWNED, CREATE SCHEMA … AUTHORIZATION.
    Ownership,
    /// Row-level security policies.
    RowSecurityPolicy,
    /// SECURITY DEFINER routines and views.
    SecurityDefiner,
    /// MySQL `DEFINER =`.
    Definer,
    /// CREATE OR REPLACE FUNCTION or PROCEDURE.
    FunctionReplacement,
}

/// One chunk of a schema plan's bytes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanChunkRef {
    /// Name of the PtahSchemaPlanChunk (`<plan>-000` … `<plan>-015`).
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// Position of the chunk, from 0.
    #[schemars(range(min = 0, max = 15))]
    pub index: i32,
    /// SHA-256 of the chunk's bytes.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub digest: String,
    /// Size of the chunk in bytes; every chunk but the last is 512 KiB.
    #[schemars(range(min = 1, max = 524288))]
    pub size: i64,
}

/// An immutable schema plan: the bindings its fingerprint covers (plan
/// contract v2) and the chunks that hold its bytes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahSchemaPlan",
    plural = "ptahschemaplans",
    namespaced,
    status = "PtahSchemaPlanStatus",
    derive = "PartialEq",
    shortname = "ptahplan",
    category = "ptah",
    doc = "PtahSchemaPlan is an immutable plan the manager published for one PtahSchema: the exact bytes (in PtahSchemaPlanChunks) and every input they were computed from. An approval names it by UID and fingerprint; a changed input publishes a new plan, never a changed one.",
    printcolumn(name = "Schema", type_ = "string", json_path = ".spec.schemaRef.name"),
    printcolumn(
        name = "Fingerprint",
        type_ = "string",
        json_path = ".spec.fingerprint",
        priority = 1
    ),
    printcolumn(
        name = "Statements",
        type_ = "integer",
        json_path = ".spec.statementCount"
    ),
    printcolumn(
        name = "Destructive",
        type_ = "boolean",
        json_path = ".spec.destructive"
    ),
    printcolumn(
        name = "Privileges",
        type_ = "string",
        json_path = ".spec.privilegeChanges"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a PtahSchemaPlan is immutable: a changed input publishes a new plan"))]
#[serde(rename_all = "camelCase")]
pub struct PtahSchemaPlanSpec {
    /// The plan contract the fingerprint follows; 2 binds the source by kind.
    #[schemars(range(min = 2, max = 2))]
    pub contract_version: i32,
    /// The PtahSchema the plan is for (its UID, not its name, is bound).
    pub schema_ref: ObjectRef,
    /// SHA-256 of the canonical JSON of every binding: the approval identity.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub fingerprint: String,
    /// SHA-256 of the whole plan bytes.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub content_digest: String,
    /// Size of the plan bytes (at most 8 MiB).
    #[schemars(range(min = 1, max = 8388608))]
    pub size: i64,
    /// The source the plan was computed from.
    pub source: SourceBinding,
    /// Digest of the coordination identity.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: String,
    /// The database the plan was computed against, derived in the Pod.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: String,
    /// The observed state the plan starts from.
    #[schemars(length(min = 1, max = 128))]
    pub actual_state_fingerprint: String,
    /// The declared state the plan leads to.
    #[schemars(length(min = 1, max = 128))]
    pub desired_state_fingerprint: String,
    /// Digest of `spec.policy` the plan was computed under.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub policy_fingerprint: String,
    /// The execution components bound into the plan.
    pub execution_binding: ExecutionBinding,
    /// SQL dialect of the statements.
    #[schemars(length(min = 1, max = 63))]
    pub dialect: String,
    /// The plan is destructive (Ptah's reading, raised by the operator's, never
    /// lowered).
    #[serde(default)]
    pub destructive: bool,
    /// Kinds of privilege changes the operator's reading found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub privilege_changes: Vec<PrivilegeChange>,
    /// Number of statements.
    #[schemars(range(min = 1))]
    pub statement_count: i32,
    /// The chunks holding the bytes, in order (1 to 16).
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["index"]))]
    pub chunks: Vec<PlanChunkRef>,
}

/// A chunk verified to exist, by UID.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublishedChunk {
    /// Name of the chunk.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the chunk.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// Position of the chunk.
    #[schemars(range(min = 0, max = 15))]
    pub index: i32,
}

/// Whether the plan's chunks are stored and verified.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PtahSchemaPlanStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The chunks read back and verified, by UID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["index"]))]
    pub published_chunks: Vec<PublishedChunk>,
    /// `Ready` once every chunk is verified.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition<SchemaPlanConditionType>>,
}

/// A piece of a schema plan's bytes (at most 512 KiB). Reading a plan needs
/// `get` on these, not on ConfigMaps.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahSchemaPlanChunk",
    plural = "ptahschemaplanchunks",
    namespaced,
    derive = "PartialEq",
    shortname = "ptahchunk",
    category = "ptah",
    doc = "PtahSchemaPlanChunk holds up to 512 KiB of a PtahSchemaPlan's bytes, owned by the plan. Chunk boundaries may split statements and characters; readers verify each chunk's digest and the whole plan's before parsing.",
    printcolumn(
        name = "Plan",
        type_ = "string",
        json_path = ".metadata.ownerReferences[0].name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a PtahSchemaPlanChunk is immutable"))]
#[serde(rename_all = "camelCase")]
pub struct PtahSchemaPlanChunkSpec {
    /// The bytes, base64 on the wire (at most 512 KiB raw).
    #[schemars(with = "String", length(min = 1, max = 699052), extend("format" = "byte"))]
    pub data: ByteString,
}

/// One migration of a planned sequence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedMigration {
    /// The migration's version.
    #[schemars(range(min = 0))]
    pub version: i64,
    /// The exact revision identity, where the table records one beside the number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub version_key: Option<String>,
    /// The migration's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub description: Option<String>,
    /// The checksum the revision row will record (`h1:…`, `sha256:…`).
    #[schemars(length(min = 1, max = 128))]
    pub checksum: String,
    /// The file is a checkpoint carrying the cumulative schema up to its version.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checkpoint: bool,
    /// The transaction mode the file declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_mode: Option<MigrationTransactionMode>,
}

/// An immutable migration plan: the ordered sequence still pending against one
/// history, with the bindings its fingerprint covers. No SQL: the Apply reads
/// the files again from the pinned source.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahMigrationPlan",
    plural = "ptahmigrationplans",
    namespaced,
    status = "PtahMigrationPlanStatus",
    derive = "PartialEq",
    shortname = "ptahmplan",
    category = "ptah",
    doc = "PtahMigrationPlan is an immutable ordered sequence of pending migrations (versions and checksums, never SQL) the manager published for one PtahMigration against one reading of its history. An approval names it by UID and fingerprint.",
    printcolumn(
        name = "Migration",
        type_ = "string",
        json_path = ".spec.migrationRef.name"
    ),
    printcolumn(name = "From", type_ = "integer", json_path = ".spec.currentVersion"),
    printcolumn(
        name = "To",
        type_ = "integer",
        json_path = ".spec.migrations[-1:].version"
    ),
    printcolumn(
        name = "Current",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Current\")].status"
    ),
    printcolumn(
        name = "Fingerprint",
        type_ = "string",
        json_path = ".spec.fingerprint",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a PtahMigrationPlan is immutable: a changed input publishes a new plan"))]
#[serde(rename_all = "camelCase")]
pub struct PtahMigrationPlanSpec {
    /// The plan contract the fingerprint follows; 2 binds the source by kind.
    #[schemars(range(min = 2, max = 2))]
    pub contract_version: i32,
    /// The PtahMigration the plan is for.
    pub migration_ref: ObjectRef,
    /// SHA-256 of the canonical JSON of every binding: the approval identity.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub fingerprint: String,
    /// The sequence, in the order it runs (1 to 256).
    #[schemars(length(min = 1, max = 256))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"]))]
    pub migrations: Vec<PlannedMigration>,
    /// Fingerprint of the history reading the sequence continues.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub history_fingerprint: String,
    /// The history's current version when the plan was made.
    #[schemars(range(min = 0))]
    pub current_version: i64,
    /// The source the sequence comes from.
    pub source: SourceBinding,
    /// Digest of the coordination identity.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: String,
    /// The database the history was read from.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: String,
    /// Digest of `spec.policy` the plan was made under.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub policy_fingerprint: String,
    /// The policy's transaction mode (unset is its own value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_mode: Option<MigrationTransactionMode>,
    /// The execution components bound into the plan.
    pub execution_binding: ExecutionBinding,
}

/// Whether the migration plan still fits, and whether it ran.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PtahMigrationPlanStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Current` and `Executed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition<MigrationPlanConditionType>>,
    /// When a run carried the plan out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed_at: Option<Time>,
}
