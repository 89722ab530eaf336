//! Stage 2's storage: a schema plan published as an immutable
//! [`PtahSchemaPlan`] whose bytes live in [`PtahSchemaPlanChunk`]s, and read
//! back for Apply. The seed: "changed bytes are published" and "Apply
//! reconstructs and hashes the published bytes immediately before executing
//! them"; a plan is immutable, bound to what was read (plan contract v2),
//! at most 8 MiB in chunks of at most 512 KiB.
//!
//! * [`binding`] / [`fingerprint`] (pure): everything the plan binds, as
//!   [`supplychain::contract::SchemaPlanBinding`] takes it — the schema's UID,
//!   the content digest of the bytes, the source binding, the coordination and
//!   target identity digests, the actual and desired state fingerprints, the
//!   `spec.policy` digest, the execution binding, the dialect and the
//!   operator's reading (destructive, privilege changes, statement count).
//! * [`split`] (pure): the bytes in chunks of [`CHUNK_MAX_BYTES`], refusing
//!   more than [`PLAN_MAX_BYTES`]. [`plan_name`] and [`chunk_name`] give the
//!   deterministic names: `<schema>-<12 hex of the fingerprint>` and
//!   `<plan>-000` … `<plan>-015`.
//! * [`publish`]: the plan first, listing every chunk's name, index, digest
//!   and size in its spec; then each chunk, owned by the plan; then each chunk
//!   read back and checked against its digest; only then `status.publishedChunks`
//!   and `Ready=True` through the status subresource. The same fingerprint
//!   again finds the plan and completes what is missing (a manager restarted
//!   mid-publication). An object of the plan's or a chunk's name that is not
//!   exactly what this publication writes is refused, never overwritten.
//! * [`read_back`]: the bytes reassembled in index order, each chunk checked
//!   (present, owned by the plan, its digest and size), no chunk beyond the
//!   plan's list, then the total size and the content digest. What the
//!   receiver hands to an Apply runner.
//! * [`collect`]: deletes the schema's plans that status no longer names
//!   ([`still_named`]); their chunks go with them by garbage collection.
//!
//! Ownership: a plan is owned by its PtahSchema (`controller: false`,
//! `blockOwnerDeletion: false`), so deleting the schema removes its plans; a
//! chunk is owned by its plan (`controller: true`), so deleting a plan
//! removes its chunks. Plan bytes are never logged or put in an error: errors
//! name the plan, the chunk and the rule.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use supplychain::contract::{self, ContractError, SchemaPlanBinding};

use crate::api::annotations::SCHEMA_LABEL;
use crate::api::common::{ObjectRef, SchemaPolicy};
use crate::api::condition::{ConditionStatus, Reason, SchemaPlanConditionType};
use crate::api::conditions;
use crate::api::plan::{
    CHUNK_MAX_BYTES, PLAN_CONTRACT_VERSION, PLAN_MAX_BYTES, PLAN_MAX_CHUNKS, PlanChunkRef,
    PrivilegeChange, PtahSchemaPlan, PtahSchemaPlanChunk, PtahSchemaPlanChunkSpec,
    PtahSchemaPlanSpec, PtahSchemaPlanStatus, PublishedChunk,
};
use crate::api::schema::{PtahSchema, PtahSchemaStatus, SchemaPlanSummary};
use crate::api::source::SourceKind;
use crate::api::status::{ExecutionBinding, SourceBinding};
use crate::execution::job::{LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY};

/// `app.kubernetes.io/component` of a plan.
pub const PLAN_COMPONENT: &str = "schema-plan";
/// `app.kubernetes.io/component` of a chunk.
pub const CHUNK_COMPONENT: &str = "schema-plan-chunk";
// The names live with every other label and annotation name.
pub use crate::api::annotations::LABEL_PLAN_UID;
/// Hex digits of the fingerprint in a plan's name.
const NAME_HEX: usize = 12;
/// Longest plan name: its chunks append `-NNN` and stay a DNS subdomain.
const PLAN_NAME_MAX: usize = 253 - 4;

/// Why a plan is not published or not read back. Each names the object and
/// the rule; none carries plan bytes.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// More bytes than a plan may hold.
    #[error("plan of {size} bytes exceeds the limit of {limit} bytes (8 MiB)")]
    TooLarge {
        /// The size offered.
        size: usize,
        /// [`PLAN_MAX_BYTES`].
        limit: i64,
    },
    /// No bytes: a no-change plan is the verdict, not a plan to publish.
    #[error("plan has no bytes: a no-change result is not published")]
    Empty,
    /// A bound input has no canonical form (names the field).
    #[error("plan contract v2: {0}")]
    Contract(#[from] ContractError),
    /// The schema was not read from the API server.
    #[error("PtahSchema {name}: has no namespace or UID")]
    NotStored {
        /// Its name.
        name: String,
    },
    /// A name the plan or its chunks cannot take.
    #[error("plan name {name:?}: {rule}")]
    Name {
        /// The name.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// An object of the plan's name exists and is not this plan.
    #[error("PtahSchemaPlan {plan}: exists and {reason}; refused, never overwritten")]
    PlanConflict {
        /// The plan's name.
        plan: String,
        /// What differs.
        reason: String,
    },
    /// An object of a chunk's name exists and is not that chunk.
    #[error("PtahSchemaPlanChunk {chunk}: exists and {reason}; refused, never overwritten")]
    ChunkConflict {
        /// The chunk's name.
        chunk: String,
        /// What differs.
        reason: String,
    },
    /// The object is being deleted: publish again once it is gone.
    #[error("{kind} {name}: being deleted")]
    Deleting {
        /// `PtahSchemaPlan` or `PtahSchemaPlanChunk`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The plan does not exist.
    #[error("PtahSchemaPlan {plan}: not found")]
    PlanMissing {
        /// Its name.
        plan: String,
    },
    /// The plan's chunks were never all verified (`Ready` is not `True`).
    #[error("PtahSchemaPlan {plan}: not Ready; its chunks were never all verified")]
    NotReady {
        /// Its name.
        plan: String,
    },
    /// The plan's spec breaks a rule of the format.
    #[error("PtahSchemaPlan {plan}: {rule}")]
    PlanInvalid {
        /// Its name.
        plan: String,
        /// The rule.
        rule: String,
    },
    /// The plan's bytes are not the bytes the caller is bound to.
    #[error("PtahSchemaPlan {plan}: content digest {found} is not the expected {expected}")]
    ContentMismatch {
        /// Its name.
        plan: String,
        /// What the caller is bound to.
        expected: String,
        /// What the plan or its bytes give.
        found: String,
    },
    /// A chunk the plan lists does not exist.
    #[error("PtahSchemaPlanChunk {chunk} of plan {plan}: missing")]
    ChunkMissing {
        /// The plan.
        plan: String,
        /// The chunk.
        chunk: String,
    },
    /// A chunk of the plan's list is not owned by the plan.
    #[error("PtahSchemaPlanChunk {chunk}: not owned by plan {plan} (UID {plan_uid})")]
    ChunkForeign {
        /// The plan.
        plan: String,
        /// The plan's UID.
        plan_uid: String,
        /// The chunk.
        chunk: String,
    },
    /// A chunk's bytes are not what the plan lists.
    #[error("PtahSchemaPlanChunk {chunk} of plan {plan}: {reason}")]
    ChunkAltered {
        /// The plan.
        plan: String,
        /// The chunk.
        chunk: String,
        /// What differs (sizes and digests, never bytes).
        reason: String,
    },
    /// A chunk of the plan that its list does not name.
    #[error("PtahSchemaPlanChunk {chunk}: belongs to plan {plan} but is not in its list")]
    ChunkExtra {
        /// The plan.
        plan: String,
        /// The chunk.
        chunk: String,
    },
    /// The API server failed; worth retrying.
    #[error("{what}: {source}")]
    Api {
        /// The request.
        what: String,
        /// The error.
        #[source]
        source: Box<kube::Error>,
    },
}

impl PlanError {
    /// Whether this is the API server failing or an object on its way out
    /// (publish again later) rather than a refusal.
    pub fn is_transient(&self) -> bool {
        matches!(self, PlanError::Api { .. } | PlanError::Deleting { .. })
    }

    fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PlanError {
        let what = what.into();
        move |source| PlanError::Api {
            what,
            source: Box::new(source),
        }
    }
}

/// What a Plan result hands over to be published, beside the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanInput {
    /// The plan bytes, exactly as the Plan produced them.
    pub bytes: Vec<u8>,
    /// Number of statements.
    pub statement_count: i32,
    /// The plan is destructive (Ptah's reading, raised by the operator's).
    pub destructive: bool,
    /// Kinds of privilege changes the operator's reading found.
    pub privilege_changes: Vec<PrivilegeChange>,
    /// SQL dialect of the statements.
    pub dialect: String,
    /// The source the Plan ran on.
    pub source: SourceBinding,
    /// Digest of the coordination identity.
    pub coordination_digest: String,
    /// The database the Plan read, as derived in its Pod.
    pub target_identity_digest: String,
    /// The observed state the plan starts from.
    pub actual_state_fingerprint: String,
    /// The declared state the plan leads to.
    pub desired_state_fingerprint: String,
    /// The execution components the Plan ran under.
    pub execution_binding: ExecutionBinding,
}

/// A plan published: what `status.plan` holds, and the chunks verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// For `status.plan` (the lifecycle sets `approvalRequired` by policy).
    pub summary: SchemaPlanSummary,
    /// The chunks read back and verified, by UID, in index order.
    pub chunks: Vec<PublishedChunk>,
    /// Whether this call wrote anything (false: it was already complete).
    pub wrote: bool,
}

/// `sha256:<hex>` of some bytes.
pub fn content_digest(bytes: &[u8]) -> String {
    supplychain::sha256_digest(bytes)
}

/// The `spec.policy` digest a plan binds.
pub fn policy_fingerprint(policy: &SchemaPolicy) -> Result<String, PlanError> {
    let value = serde_json::to_value(policy)
        .map_err(|e| ContractError::Serialize(format!("spec.policy: {e}")))?;
    Ok(contract::policy_fingerprint(&value)?)
}

/// The API's binding as the contract holds it, field for field.
pub(super) fn contract_source(s: &SourceBinding) -> contract::SourceBinding {
    contract::SourceBinding {
        kind: match s.kind {
            SourceKind::ConfigMap => contract::SourceKind::ConfigMap,
            SourceKind::Git => contract::SourceKind::Git,
            SourceKind::OCI => contract::SourceKind::OCI,
            SourceKind::Flux => contract::SourceKind::Flux,
        },
        content_digest: s.content_digest.clone(),
        config_map_uid: s.config_map_uid.clone(),
        snapshot_name: s.snapshot_name.clone(),
        location_digest: s.location_digest.clone(),
        commit: s.commit.clone(),
        resolved_reference: s.resolved_reference.clone(),
        source_policy_uid: s.source_policy_uid.clone(),
        source_policy_digest: s.source_policy_digest.clone(),
        verification_policy_uid: s.verification_policy_uid.clone(),
        verification_policy_digest: s.verification_policy_digest.clone(),
        signer_evidence_digest: s.signer_evidence_digest.clone(),
        flux_object_uid: s.flux_object_uid.clone(),
        flux_revision: s.flux_revision.clone(),
    }
}

pub(super) fn contract_execution(e: &ExecutionBinding) -> contract::ExecutionBinding {
    contract::ExecutionBinding {
        epoch: e.epoch.clone(),
        controller_state_version: e.controller_state_version,
        ptah_version: e.ptah_version.clone(),
        executor_image: e.executor_image.clone(),
        runner_protocol_version: e.runner_protocol_version,
    }
}

/// A privilege change as the API spells it (`Grant`, `RowSecurityPolicy`…).
fn privilege_name(p: PrivilegeChange) -> Result<String, PlanError> {
    match serde_json::to_value(p) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        _ => Err(ContractError::Invalid {
            field: "privilegeChanges",
            reason: "does not serialize to a name",
        }
        .into()),
    }
}

/// Everything a schema plan binds (plan contract v2), for the schema of UID
/// `schema_uid` under `policy` (its `spec.policy` as stored).
pub fn binding(
    schema_uid: &str,
    policy: &SchemaPolicy,
    input: &PlanInput,
) -> Result<SchemaPlanBinding, PlanError> {
    Ok(SchemaPlanBinding {
        schema_uid: schema_uid.to_string(),
        plan_content_digest: content_digest(&input.bytes),
        source: contract_source(&input.source),
        coordination_digest: input.coordination_digest.clone(),
        target_identity_digest: input.target_identity_digest.clone(),
        actual_state_fingerprint: input.actual_state_fingerprint.clone(),
        desired_state_fingerprint: input.desired_state_fingerprint.clone(),
        policy_fingerprint: policy_fingerprint(policy)?,
        execution: contract_execution(&input.execution_binding),
        dialect: input.dialect.clone(),
        destructive: input.destructive,
        privilege_changes: input
            .privilege_changes
            .iter()
            .map(|p| privilege_name(*p))
            .collect::<Result<_, _>>()?,
        statement_count: i64::from(input.statement_count),
    })
}

/// The plan's fingerprint: the approval identity ([`binding`]'s
/// `sha256:<hex>` of canonical JSON).
pub fn fingerprint(
    schema_uid: &str,
    policy: &SchemaPolicy,
    input: &PlanInput,
) -> Result<String, PlanError> {
    Ok(binding(schema_uid, policy, input)?.fingerprint()?)
}

/// The bytes in chunks of [`CHUNK_MAX_BYTES`], every one full but the last;
/// none for no bytes. More than [`PLAN_MAX_BYTES`] is refused.
pub fn split(bytes: &[u8]) -> Result<Vec<&[u8]>, PlanError> {
    if bytes.len() as u64 > PLAN_MAX_BYTES as u64 {
        return Err(PlanError::TooLarge {
            size: bytes.len(),
            limit: PLAN_MAX_BYTES,
        });
    }
    Ok(bytes.chunks(CHUNK_MAX_BYTES as usize).collect())
}

/// `<schema>-<first 12 hex digits of the fingerprint>`.
pub fn plan_name(schema: &str, fingerprint: &str) -> Result<String, PlanError> {
    let hex = fingerprint
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .ok_or_else(|| PlanError::Name {
            name: fingerprint.to_string(),
            rule: "a fingerprint is sha256: and 64 lowercase hex digits",
        })?;
    let name = format!("{schema}-{}", &hex[..NAME_HEX]);
    if schema.is_empty() || name.len() > PLAN_NAME_MAX {
        return Err(PlanError::Name {
            name,
            rule: "a plan name is at most 249 characters, so its chunk names fit 253",
        });
    }
    Ok(name)
}

/// `<plan>-NNN`: the chunk of `index` (from 0, three digits).
pub fn chunk_name(plan: &str, index: usize) -> String {
    format!("{plan}-{index:03}")
}

/// Whether `chunk` has the form of a chunk name of `plan`.
fn is_chunk_name_of(plan: &str, chunk: &str) -> bool {
    chunk
        .strip_prefix(plan)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The spec of the plan of `schema` (name, UID) for `input` (pure; the
/// bytes must already have passed [`split`]).
pub fn plan_spec(
    schema: &ObjectRef,
    policy: &SchemaPolicy,
    input: &PlanInput,
) -> Result<(String, PtahSchemaPlanSpec), PlanError> {
    let parts = split(&input.bytes)?;
    if parts.is_empty() {
        return Err(PlanError::Empty);
    }
    let bound = binding(&schema.uid, policy, input)?;
    let fingerprint = bound.fingerprint()?;
    let name = plan_name(&schema.name, &fingerprint)?;
    let chunks = parts
        .iter()
        .enumerate()
        .map(|(index, part)| PlanChunkRef {
            name: chunk_name(&name, index),
            index: index as i32,
            digest: content_digest(part),
            size: part.len() as i64,
        })
        .collect();
    let mut privilege_changes = input.privilege_changes.clone();
    privilege_changes.sort_unstable();
    privilege_changes.dedup();
    let spec = PtahSchemaPlanSpec {
        contract_version: PLAN_CONTRACT_VERSION,
        schema_ref: schema.clone(),
        fingerprint,
        content_digest: bound.plan_content_digest,
        size: input.bytes.len() as i64,
        source: input.source.clone(),
        coordination_digest: input.coordination_digest.clone(),
        target_identity_digest: input.target_identity_digest.clone(),
        actual_state_fingerprint: input.actual_state_fingerprint.clone(),
        desired_state_fingerprint: input.desired_state_fingerprint.clone(),
        policy_fingerprint: bound.policy_fingerprint,
        execution_binding: input.execution_binding.clone(),
        dialect: input.dialect.clone(),
        destructive: input.destructive,
        privilege_changes,
        statement_count: input.statement_count,
        chunks,
    };
    Ok((name, spec))
}

/// Why a stored plan spec is not `expected`, or `None` when it is.
fn spec_mismatch(stored: &PtahSchemaPlanSpec, expected: &PtahSchemaPlanSpec) -> Option<String> {
    if stored.fingerprint != expected.fingerprint {
        return Some(format!(
            "has fingerprint {}, not {}",
            stored.fingerprint, expected.fingerprint
        ));
    }
    if stored.content_digest != expected.content_digest {
        return Some(format!(
            "has content digest {}, not {}",
            stored.content_digest, expected.content_digest
        ));
    }
    if stored.chunks != expected.chunks {
        return Some("lists other chunks".to_string());
    }
    (stored != expected).then(|| "has another spec under the same fingerprint".to_string())
}

fn schema_ref_of(schema: &PtahSchema) -> Result<(ObjectRef, String), PlanError> {
    match (schema.namespace(), schema.meta().uid.clone()) {
        (Some(ns), Some(uid)) => Ok((
            ObjectRef {
                name: schema.name_any(),
                uid,
            },
            ns,
        )),
        _ => Err(PlanError::NotStored {
            name: schema.name_any(),
        }),
    }
}

fn labels(schema: &str, component: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
    ]);
    // Admission keeps schema names to 63 characters; a longer one is no label.
    if schema.len() <= 63 {
        labels.insert(SCHEMA_LABEL.to_string(), schema.to_string());
    }
    labels
}

/// The plan object: owned by the schema, not as its controller.
pub fn plan_object(
    name: &str,
    namespace: &str,
    schema: &ObjectRef,
    spec: PtahSchemaPlanSpec,
) -> PtahSchemaPlan {
    let mut plan = PtahSchemaPlan::new(name, spec);
    plan.metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels(&schema.name, PLAN_COMPONENT)),
        owner_references: Some(vec![OwnerReference {
            api_version: PtahSchema::api_version(&()).into_owned(),
            kind: PtahSchema::kind(&()).into_owned(),
            name: schema.name.clone(),
            uid: schema.uid.clone(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }]),
        ..ObjectMeta::default()
    };
    plan
}

/// A chunk object: owned by the plan (its controller).
pub fn chunk_object(
    r: &PlanChunkRef,
    namespace: &str,
    schema: &str,
    plan: &str,
    plan_uid: &str,
    data: &[u8],
) -> PtahSchemaPlanChunk {
    let mut chunk = PtahSchemaPlanChunk::new(
        &r.name,
        PtahSchemaPlanChunkSpec {
            data: ByteString(data.to_vec()),
        },
    );
    let mut labels = labels(schema, CHUNK_COMPONENT);
    labels.insert(LABEL_PLAN_UID.to_string(), plan_uid.to_string());
    chunk.metadata = ObjectMeta {
        name: Some(r.name.clone()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels),
        owner_references: Some(vec![OwnerReference {
            api_version: PtahSchemaPlan::api_version(&()).into_owned(),
            kind: PtahSchemaPlan::kind(&()).into_owned(),
            name: plan.to_string(),
            uid: plan_uid.to_string(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        }]),
        ..ObjectMeta::default()
    };
    chunk
}

pub(crate) fn owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.uid == uid)
}

/// Why a stored chunk is not the chunk `r` of the plan `plan_uid`, or `None`.
fn chunk_mismatch(
    plan: &str,
    plan_uid: &str,
    r: &PlanChunkRef,
    chunk: &PtahSchemaPlanChunk,
) -> Option<PlanError> {
    if !owned_by(&chunk.metadata, plan_uid) {
        return Some(PlanError::ChunkForeign {
            plan: plan.to_string(),
            plan_uid: plan_uid.to_string(),
            chunk: r.name.clone(),
        });
    }
    let data = &chunk.spec.data.0;
    let digest = content_digest(data);
    if data.len() as i64 != r.size || digest != r.digest {
        return Some(PlanError::ChunkAltered {
            plan: plan.to_string(),
            chunk: r.name.clone(),
            reason: format!(
                "holds {} bytes of digest {digest}; the plan lists {} bytes of digest {}",
                data.len(),
                r.size,
                r.digest
            ),
        });
    }
    None
}

/// Publishes the plan of `schema` for `input` (see the module doc), or
/// completes its publication; returns what `status.plan` holds.
pub async fn publish(
    client: &Client,
    schema: &PtahSchema,
    input: PlanInput,
) -> Result<Published, PlanError> {
    // Everything pure first: a refused plan writes nothing.
    let (schema_ref, namespace) = schema_ref_of(schema)?;
    let (name, spec) = plan_spec(&schema_ref, &schema.spec.policy, &input)?;
    let plans: Api<PtahSchemaPlan> = Api::namespaced(client.clone(), &namespace);
    let chunks: Api<PtahSchemaPlanChunk> = Api::namespaced(client.clone(), &namespace);
    let mut wrote = false;

    // The plan, listing its chunks, before any chunk: a chunk needs its
    // owner's UID, and an interrupted publication is found by the plan's name.
    let plan_err = |what: &str| PlanError::api(format!("{what} PtahSchemaPlan {name}"));
    let stored = match plans.get_opt(&name).await.map_err(plan_err("reading"))? {
        Some(existing) => existing,
        None => {
            let object = plan_object(&name, &namespace, &schema_ref, spec.clone());
            match plans.create(&PostParams::default(), &object).await {
                Ok(created) => {
                    wrote = true;
                    created
                }
                // Another pass created it meanwhile: check what it wrote.
                Err(kube::Error::Api(e)) if e.code == 409 => plans
                    .get_opt(&name)
                    .await
                    .map_err(plan_err("reading"))?
                    .ok_or_else(|| PlanError::Deleting {
                        kind: "PtahSchemaPlan",
                        name: name.clone(),
                    })?,
                Err(e) => return Err(plan_err("creating")(e)),
            }
        }
    };
    if stored.metadata.deletion_timestamp.is_some() {
        return Err(PlanError::Deleting {
            kind: "PtahSchemaPlan",
            name,
        });
    }
    if let Some(reason) = spec_mismatch(&stored.spec, &spec) {
        return Err(PlanError::PlanConflict { plan: name, reason });
    }
    if !owned_by(&stored.metadata, &schema_ref.uid) {
        return Err(PlanError::PlanConflict {
            plan: name,
            reason: format!("is not owned by PtahSchema {}", schema_ref.name),
        });
    }
    let plan_uid = stored
        .metadata
        .uid
        .clone()
        .ok_or_else(|| PlanError::PlanInvalid {
            plan: name.clone(),
            rule: "has no UID".to_string(),
        })?;

    // Each missing chunk, owned by the plan; then each chunk read back and
    // checked against its digest before the plan says Ready. One that exists
    // is checked, never rewritten. A chunk of the UID a Ready plan's status
    // already verified is not read again: chunks are immutable (CEL), and a
    // UID is never reused, so a repeated publication stays cheap.
    let mut status = stored.status.clone().unwrap_or_default();
    let ready = conditions::is_true(&status.conditions, SchemaPlanConditionType::Ready);
    let verified: BTreeMap<i32, &str> = status
        .published_chunks
        .iter()
        .filter(|_| ready)
        .map(|c| (c.index, c.uid.as_str()))
        .collect();
    let parts = split(&input.bytes)?;
    let mut published = Vec::with_capacity(spec.chunks.len());
    for (r, part) in spec.chunks.iter().zip(&parts) {
        let chunk_err =
            |what: &str| PlanError::api(format!("{what} PtahSchemaPlanChunk {}", r.name));
        let deleting = || PlanError::Deleting {
            kind: "PtahSchemaPlanChunk",
            name: r.name.clone(),
        };
        match chunks
            .get_metadata_opt(&r.name)
            .await
            .map_err(chunk_err("reading"))?
        {
            Some(m) if m.metadata.deletion_timestamp.is_some() => return Err(deleting()),
            Some(m)
                if m.metadata.uid.is_some()
                    && verified.get(&r.index).copied() == m.metadata.uid.as_deref()
                    && owned_by(&m.metadata, &plan_uid) =>
            {
                published.push(PublishedChunk {
                    name: r.name.clone(),
                    uid: m.metadata.uid.unwrap_or_default(),
                    index: r.index,
                });
                continue;
            }
            Some(_) => {}
            None => {
                let object = chunk_object(r, &namespace, &schema_ref.name, &name, &plan_uid, part);
                match chunks.create(&PostParams::default(), &object).await {
                    Ok(_) => wrote = true,
                    // Written meanwhile: the read-back below checks it.
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(chunk_err("creating")(e)),
                }
            }
        }
        let chunk = chunks
            .get_opt(&r.name)
            .await
            .map_err(chunk_err("reading"))?
            .ok_or_else(|| PlanError::ChunkMissing {
                plan: name.clone(),
                chunk: r.name.clone(),
            })?;
        if chunk.metadata.deletion_timestamp.is_some() {
            return Err(deleting());
        }
        if let Some(refusal) = chunk_mismatch(&name, &plan_uid, r, &chunk) {
            return Err(match refusal {
                PlanError::ChunkForeign { .. } => PlanError::ChunkConflict {
                    chunk: r.name.clone(),
                    reason: format!("is not owned by plan {name}"),
                },
                PlanError::ChunkAltered { reason, .. } => PlanError::ChunkConflict {
                    chunk: r.name.clone(),
                    reason,
                },
                other => other,
            });
        }
        published.push(PublishedChunk {
            name: r.name.clone(),
            uid: chunk.metadata.uid.clone().unwrap_or_default(),
            index: r.index,
        });
    }

    if !ready
        || status.published_chunks != published
        || status.observed_generation != stored.metadata.generation
    {
        status.observed_generation = stored.metadata.generation;
        status.published_chunks = published.clone();
        conditions::set(
            &mut status.conditions,
            SchemaPlanConditionType::Ready,
            ConditionStatus::True,
            Reason::Published,
            format!("{} chunks verified", published.len()),
            stored.metadata.generation,
            &Time(Timestamp::now()),
        );
        write_status(&plans, &name, &status).await?;
        wrote = true;
    }

    Ok(Published {
        summary: SchemaPlanSummary {
            name,
            uid: plan_uid,
            fingerprint: spec.fingerprint,
            content_digest: Some(spec.content_digest),
            created_at: stored.metadata.creation_timestamp.clone(),
            statement_count: Some(spec.statement_count),
            destructive: spec.destructive,
            privilege_changes: spec.privilege_changes,
            approval_required: false,
            approval: None,
        },
        chunks: published,
        wrote,
    })
}

async fn write_status(
    plans: &Api<PtahSchemaPlan>,
    name: &str,
    status: &PtahSchemaPlanStatus,
) -> Result<(), PlanError> {
    plans
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map_err(PlanError::api(format!(
            "writing the status of PtahSchemaPlan {name}"
        )))?;
    Ok(())
}

/// Checks the plan's list of chunks: indices 0, 1, … in order, at most
/// [`PLAN_MAX_CHUNKS`], every chunk full but the last, sizes adding up.
fn check_list(plan: &str, spec: &PtahSchemaPlanSpec) -> Result<(), PlanError> {
    let invalid = |rule: String| PlanError::PlanInvalid {
        plan: plan.to_string(),
        rule,
    };
    if spec.chunks.is_empty() || spec.chunks.len() > PLAN_MAX_CHUNKS {
        return Err(invalid(format!(
            "lists {} chunks; a plan has 1 to {PLAN_MAX_CHUNKS}",
            spec.chunks.len()
        )));
    }
    if !(1..=PLAN_MAX_BYTES).contains(&spec.size) {
        return Err(invalid(format!(
            "size {} is not within 1 to {PLAN_MAX_BYTES} bytes",
            spec.size
        )));
    }
    let last = spec.chunks.len() - 1;
    let mut total = 0i64;
    for (i, c) in spec.chunks.iter().enumerate() {
        if c.index != i as i32 || c.name != chunk_name(plan, i) {
            return Err(invalid(format!(
                "chunk {} at position {i} is not {}",
                c.name,
                chunk_name(plan, i)
            )));
        }
        let full = c.size == CHUNK_MAX_BYTES;
        if !(1..=CHUNK_MAX_BYTES).contains(&c.size) || (i < last && !full) {
            return Err(invalid(format!(
                "chunk {} has {} bytes; every chunk but the last holds {CHUNK_MAX_BYTES}",
                c.name, c.size
            )));
        }
        total += c.size;
    }
    if total != spec.size {
        return Err(invalid(format!(
            "chunks add up to {total} bytes, not the plan's size {}",
            spec.size
        )));
    }
    Ok(())
}

/// The plan's bytes, reassembled from its chunks and verified (see the
/// module doc); `expected_content_digest` is what the caller is bound to
/// (the Apply claim's plan).
pub async fn read_back(
    client: &Client,
    namespace: &str,
    plan_name: &str,
    expected_content_digest: &str,
) -> Result<Vec<u8>, PlanError> {
    let plans: Api<PtahSchemaPlan> = Api::namespaced(client.clone(), namespace);
    let chunks: Api<PtahSchemaPlanChunk> = Api::namespaced(client.clone(), namespace);
    let plan = plans
        .get_opt(plan_name)
        .await
        .map_err(PlanError::api(format!(
            "reading PtahSchemaPlan {plan_name}"
        )))?
        .ok_or_else(|| PlanError::PlanMissing {
            plan: plan_name.to_string(),
        })?;
    if plan.metadata.deletion_timestamp.is_some() {
        return Err(PlanError::Deleting {
            kind: "PtahSchemaPlan",
            name: plan_name.to_string(),
        });
    }
    let ready = plan
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, SchemaPlanConditionType::Ready));
    if !ready {
        return Err(PlanError::NotReady {
            plan: plan_name.to_string(),
        });
    }
    if plan.spec.content_digest != expected_content_digest {
        return Err(PlanError::ContentMismatch {
            plan: plan_name.to_string(),
            expected: expected_content_digest.to_string(),
            found: plan.spec.content_digest.clone(),
        });
    }
    check_list(plan_name, &plan.spec)?;
    let plan_uid = plan.metadata.uid.clone().unwrap_or_default();

    // No chunk of this plan beyond its list: one owned by it, labelled with
    // it, or named as its chunk.
    let listed: BTreeSet<&str> = plan.spec.chunks.iter().map(|c| c.name.as_str()).collect();
    let all = chunks
        .list_metadata(&ListParams::default())
        .await
        .map_err(PlanError::api("listing PtahSchemaPlanChunks"))?;
    for m in &all.items {
        let name = m.name_any();
        let labelled = m.labels().get(LABEL_PLAN_UID) == Some(&plan_uid);
        let ours =
            owned_by(&m.metadata, &plan_uid) || labelled || is_chunk_name_of(plan_name, &name);
        if ours && !listed.contains(name.as_str()) {
            return Err(PlanError::ChunkExtra {
                plan: plan_name.to_string(),
                chunk: name,
            });
        }
    }

    let mut bytes = Vec::with_capacity(usize::try_from(plan.spec.size).unwrap_or_default());
    for r in &plan.spec.chunks {
        let chunk = chunks
            .get_opt(&r.name)
            .await
            .map_err(PlanError::api(format!(
                "reading PtahSchemaPlanChunk {}",
                r.name
            )))?
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .ok_or_else(|| PlanError::ChunkMissing {
                plan: plan_name.to_string(),
                chunk: r.name.clone(),
            })?;
        if let Some(refusal) = chunk_mismatch(plan_name, &plan_uid, r, &chunk) {
            return Err(refusal);
        }
        bytes.extend_from_slice(&chunk.spec.data.0);
    }
    let found = content_digest(&bytes);
    if bytes.len() as i64 != plan.spec.size || found != expected_content_digest {
        return Err(PlanError::ContentMismatch {
            plan: plan_name.to_string(),
            expected: expected_content_digest.to_string(),
            found: format!("{found} ({} bytes)", bytes.len()),
        });
    }
    Ok(bytes)
}

/// The plans a schema's status still names, which [`collect`] keeps: the
/// current plan (`status.plan`, also the one awaiting approval), the plan the
/// claim in flight runs (`activeOperation.planName`), the plan an Apply's
/// owed proof ran (`pendingObservation.planName`) and the last plan proved
/// applied (`status.applied`, which `kubectl ptah plan --applied` prints).
///
/// An approval does not keep a plan: an approval of a plan status no longer
/// names is an approval of a retired plan, which authorizes nothing; the
/// journal keeps the retired plan's name, UID and fingerprint.
pub fn still_named(status: &PtahSchemaStatus) -> Vec<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    names.extend(status.plan.as_ref().map(|p| p.name.clone()));
    names.extend(
        status
            .active_operation
            .as_ref()
            .and_then(|c| c.plan_name.clone()),
    );
    names.extend(
        status
            .pending_observation
            .as_ref()
            .map(|p| p.plan_name.clone()),
    );
    names.extend(status.applied.as_ref().map(|a| a.plan_name.clone()));
    names.into_iter().filter(|n| !n.is_empty()).collect()
}

/// Deletes the plans `schema` owns whose names are not in `keep` (normally
/// [`still_named`]); their chunks go with them by garbage collection. Returns
/// the names deleted.
pub async fn collect(
    client: &Client,
    schema: &PtahSchema,
    keep: &[String],
) -> Result<Vec<String>, PlanError> {
    let (schema_ref, namespace) = schema_ref_of(schema)?;
    let plans: Api<PtahSchemaPlan> = Api::namespaced(client.clone(), &namespace);
    let selector = format!("{SCHEMA_LABEL}={}", schema_ref.name);
    collect_owned(&plans, &selector, &schema_ref.uid, keep)
        .await
        .map_err(|(what, e)| PlanError::api(what)(e))
}

/// Deletes the objects `selector` lists that `owner_uid` owns and `keep`
/// does not name, each only as the object listed (by UID), so one published
/// again meanwhile is left alone. Returns the names deleted; an error names
/// what was being done. Plans of both families are collected by it.
pub(crate) async fn collect_owned<K>(
    api: &Api<K>,
    selector: &str,
    owner_uid: &str,
    keep: &[String],
) -> Result<Vec<String>, (String, kube::Error)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let keep: BTreeSet<&str> = keep.iter().map(String::as_str).collect();
    let owned = api
        .list_metadata(&ListParams::default().labels(selector))
        .await
        .map_err(|e| (format!("listing the plans labelled {selector}"), e))?;
    let mut deleted = Vec::new();
    for m in owned {
        let name = m.name_any();
        if !owned_by(&m.metadata, owner_uid) || keep.contains(name.as_str()) {
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: m.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &params).await {
            Ok(_) => deleted.push(name),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err((format!("deleting plan {name}"), e)),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::ApplyPolicy;
    use crate::api::schema::AppliedStatus;
    use crate::api::status::{ActiveOperation, OperationType};

    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;

    fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn input() -> PlanInput {
        PlanInput {
            bytes: b"CREATE TABLE orders (id bigint PRIMARY KEY);\n".to_vec(),
            statement_count: 1,
            destructive: false,
            privilege_changes: vec![PrivilegeChange::Grant],
            dialect: "postgres".into(),
            source: SourceBinding {
                source_policy_uid: Some("sp-uid".into()),
                source_policy_digest: Some(digest(3)),
                ..crate::testing::configmap_binding(digest(1), Some("ptah-src-abc"))
            },
            coordination_digest: digest(13),
            target_identity_digest: digest(14),
            actual_state_fingerprint: digest(23),
            desired_state_fingerprint: digest(24),
            execution_binding: ExecutionBinding {
                epoch: format!("v1-{}", "ab".repeat(16)),
                controller_state_version: 1,
                ptah_version: "0.23.0".into(),
                executor_image: format!("ghcr.io/stokaro/ptah@{}", digest(9)),
                runner_protocol_version: 1,
            },
        }
    }

    /// One change to a bound input.
    type Edit = Box<dyn Fn(&mut PlanInput)>;

    fn fp(uid: &str, policy: &SchemaPolicy, input: &PlanInput) -> String {
        fingerprint(uid, policy, input).expect("fingerprint")
    }

    #[test]
    fn fingerprint_is_stable() {
        let policy = SchemaPolicy::default();
        let a = fp("schema-uid", &policy, &input());
        assert_eq!(a, fp("schema-uid", &policy, &input()));
        // The golden value, computed apart from this code (the v2 document by
        // hand, `spec.policy` as `{"allowDestructive":false,"apply":"OnApproval",
        // "driftSeverity":"all","lockTimeout":"30s","transactionMode":"file"}`):
        // a change here is a new plan contract, not a refactor.
        assert_eq!(
            a,
            "sha256:ed8b00a6c749543a4a4b4dabb53db0f0b228803dfacfde7776c11a10c9ea258c"
        );
        // Privilege changes are a set: order and repeats do not matter.
        let mut twice = input();
        twice.privilege_changes = vec![PrivilegeChange::Grant, PrivilegeChange::Grant];
        assert_eq!(a, fp("schema-uid", &policy, &twice));
        // The snapshot name is evidence, not bound.
        let mut snapshot = input();
        snapshot.source.snapshot_name = Some("ptah-src-other".into());
        assert_eq!(a, fp("schema-uid", &policy, &snapshot));
    }

    #[test]
    fn every_bound_input_changes_the_fingerprint() {
        let policy = SchemaPolicy::default();
        let base = fp("schema-uid", &policy, &input());
        let edits: Vec<(&str, Edit)> = vec![
            ("bytes", Box::new(|i| i.bytes.push(b'\n'))),
            ("statement count", Box::new(|i| i.statement_count = 2)),
            ("destructive", Box::new(|i| i.destructive = true)),
            (
                "privilege changes",
                Box::new(|i| i.privilege_changes.push(PrivilegeChange::Role)),
            ),
            ("dialect", Box::new(|i| i.dialect = "mysql".into())),
            (
                "source content digest",
                Box::new(|i| i.source.content_digest = digest(2)),
            ),
            (
                "source ConfigMap UID",
                Box::new(|i| i.source.config_map_uid = Some("other".into())),
            ),
            (
                "source policy digest",
                Box::new(|i| i.source.source_policy_digest = Some(digest(4))),
            ),
            (
                "coordination digest",
                Box::new(|i| i.coordination_digest = digest(15)),
            ),
            (
                "target identity digest",
                Box::new(|i| i.target_identity_digest = digest(16)),
            ),
            (
                "actual state",
                Box::new(|i| i.actual_state_fingerprint = digest(25)),
            ),
            (
                "desired state",
                Box::new(|i| i.desired_state_fingerprint = digest(26)),
            ),
            (
                "execution epoch",
                Box::new(|i| i.execution_binding.epoch = format!("v1-{}", "cd".repeat(16))),
            ),
            (
                "controller state version",
                Box::new(|i| i.execution_binding.controller_state_version = 2),
            ),
            (
                "Ptah version",
                Box::new(|i| i.execution_binding.ptah_version = "0.24.0".into()),
            ),
            (
                "executor image",
                Box::new(|i| i.execution_binding.executor_image = "other@sha256:00".into()),
            ),
            (
                "runner protocol version",
                Box::new(|i| i.execution_binding.runner_protocol_version = 2),
            ),
        ];
        let mut seen = BTreeSet::from([base.clone()]);
        for (what, edit) in edits {
            let mut changed = input();
            edit(&mut changed);
            let f = fp("schema-uid", &policy, &changed);
            assert!(seen.insert(f), "{what} did not change the fingerprint");
        }
        assert!(
            seen.insert(fp("other-uid", &policy, &input())),
            "schema UID"
        );
        let other_policy = SchemaPolicy {
            apply: ApplyPolicy::Always,
            ..SchemaPolicy::default()
        };
        assert!(
            seen.insert(fp("schema-uid", &other_policy, &input())),
            "spec.policy"
        );
        let protected = SchemaPolicy {
            protected_tables: vec!["orders".into()],
            ..SchemaPolicy::default()
        };
        assert!(
            seen.insert(fp("schema-uid", &protected, &input())),
            "spec.policy.protectedTables"
        );
    }

    #[test]
    fn a_bound_input_without_canonical_form_is_refused_naming_the_field() {
        let mut i = input();
        i.statement_count = 0;
        let err = fingerprint("schema-uid", &SchemaPolicy::default(), &i).unwrap_err();
        assert!(err.to_string().contains("statementCount"), "{err}");
        let err = fingerprint("", &SchemaPolicy::default(), &input()).unwrap_err();
        assert!(err.to_string().contains("schemaUID"), "{err}");
    }

    #[test]
    fn split_cuts_at_512_kib_and_refuses_more_than_8_mib() {
        let sizes = |n: usize| -> Vec<usize> {
            split(&vec![7u8; n])
                .expect("within the limit")
                .iter()
                .map(|c| c.len())
                .collect()
        };
        assert!(sizes(0).is_empty());
        assert_eq!(sizes(1), vec![1]);
        assert_eq!(sizes(512 * KIB), vec![512 * KIB]);
        assert_eq!(sizes(512 * KIB + 1), vec![512 * KIB, 1]);
        assert_eq!(sizes(3 * MIB), vec![512 * KIB; 6]);
        assert_eq!(sizes(8 * MIB), vec![512 * KIB; PLAN_MAX_CHUNKS]);
        let err = split(&vec![7u8; 8 * MIB + 1]).unwrap_err();
        assert!(
            matches!(err, PlanError::TooLarge { size, limit } if size == 8 * MIB + 1 && limit == PLAN_MAX_BYTES)
        );
        assert!(err.to_string().contains("8388608"), "{err}");
    }

    #[test]
    fn chunks_reassemble_to_the_bytes() {
        let bytes: Vec<u8> = (0..(2 * MIB + 17)).map(|i| (i % 251) as u8).collect();
        assert_eq!(split(&bytes).expect("split").concat(), bytes);
    }

    #[test]
    fn names_follow_the_schema_and_the_fingerprint() {
        let f = format!("sha256:0123456789ab{}", "f".repeat(52));
        let plan = plan_name("orders", &f).expect("name");
        assert_eq!(plan, "orders-0123456789ab");
        assert_eq!(chunk_name(&plan, 0), "orders-0123456789ab-000");
        assert_eq!(chunk_name(&plan, 15), "orders-0123456789ab-015");
        assert!(is_chunk_name_of(&plan, "orders-0123456789ab-007"));
        assert!(!is_chunk_name_of(&plan, "orders-0123456789ab-07"));
        assert!(!is_chunk_name_of(&plan, "orders-0123456789ab-0123456789ab"));
        assert!(plan_name("orders", "sha256:XYZ").is_err());
        assert!(plan_name("orders", &"0".repeat(64)).is_err());
        let longest = "a".repeat(PLAN_NAME_MAX - 13);
        assert_eq!(
            chunk_name(&plan_name(&longest, &f).expect("fits"), 15).len(),
            253
        );
        let err = plan_name(&format!("{longest}a"), &f).unwrap_err();
        assert!(err.to_string().contains("at most 249"), "{err}");
    }

    #[test]
    fn the_spec_lists_every_chunk_with_its_digest_and_size() {
        let mut i = input();
        i.bytes = vec![1u8; 512 * KIB + 10];
        i.privilege_changes = vec![PrivilegeChange::Role, PrivilegeChange::Grant];
        let schema = ObjectRef {
            name: "orders".into(),
            uid: "schema-uid".into(),
        };
        let (name, spec) = plan_spec(&schema, &SchemaPolicy::default(), &i).expect("spec");
        assert_eq!(name, plan_name("orders", &spec.fingerprint).expect("name"));
        assert_eq!(spec.size, (512 * KIB + 10) as i64);
        assert_eq!(spec.content_digest, content_digest(&i.bytes));
        assert_eq!(spec.chunks.len(), 2);
        assert_eq!(spec.chunks[0].name, format!("{name}-000"));
        assert_eq!(spec.chunks[0].size, CHUNK_MAX_BYTES);
        assert_eq!(spec.chunks[0].digest, content_digest(&i.bytes[..512 * KIB]));
        assert_eq!(spec.chunks[1].index, 1);
        assert_eq!(spec.chunks[1].size, 10);
        assert_eq!(
            spec.privilege_changes,
            vec![PrivilegeChange::Grant, PrivilegeChange::Role]
        );
        assert_eq!(
            spec.fingerprint,
            fingerprint("schema-uid", &SchemaPolicy::default(), &i).expect("fingerprint")
        );
        check_list(&name, &spec).expect("a well-formed list");

        let mut empty = input();
        empty.bytes.clear();
        assert!(matches!(
            plan_spec(&schema, &SchemaPolicy::default(), &empty),
            Err(PlanError::Empty)
        ));
    }

    #[test]
    fn a_list_out_of_order_or_not_adding_up_is_refused() {
        let schema = ObjectRef {
            name: "orders".into(),
            uid: "schema-uid".into(),
        };
        let mut i = input();
        i.bytes = vec![1u8; 512 * KIB + 10];
        let (name, spec) = plan_spec(&schema, &SchemaPolicy::default(), &i).expect("spec");
        let mut swapped = spec.clone();
        swapped.chunks.swap(0, 1);
        assert!(check_list(&name, &swapped).is_err());
        let mut short = spec.clone();
        short.size -= 1;
        assert!(check_list(&name, &short).is_err());
        let mut renamed = spec;
        renamed.chunks[1].name = "elsewhere-001".into();
        let err = check_list(&name, &renamed).unwrap_err();
        assert!(err.to_string().contains("elsewhere-001"), "{err}");
    }

    #[test]
    fn status_names_the_plans_collection_keeps() {
        let summary = |name: &str| SchemaPlanSummary {
            name: name.into(),
            uid: format!("{name}-uid"),
            fingerprint: digest(1),
            content_digest: None,
            created_at: None,
            statement_count: None,
            destructive: false,
            privilege_changes: vec![],
            approval_required: true,
            approval: None,
        };
        let mut st = PtahSchemaStatus {
            plan: Some(summary("current")),
            ..Default::default()
        };
        st.active_operation = Some(ActiveOperation {
            type_: OperationType::Apply,
            operation_id: digest(2),
            input_fingerprint: digest(3),
            job_name: None,
            job_uid: None,
            attempt: 1,
            started_at: Time(Timestamp::UNIX_EPOCH),
            retry_not_before: None,
            dispatch_started: true,
            dispatch_not_after: None,
            execution_not_after: None,
            execution_epoch: None,
            source: None,
            coordination_digest: None,
            target_identity_digest: None,
            lease_epoch: None,
            lease_duration_seconds: None,
            lease_continuity_lost: false,
            plan_name: Some("running".into()),
            plan_uid: None,
            plan_fingerprint: None,
            authorization: None,
            approval_name: None,
            approval_uid: None,
            approver: None,
            admission_snapshot_digest: None,
        });
        let applied: AppliedStatus = serde_json::from_value(json!({
            "operationID": digest(4),
            "planName": "applied",
            "planUID": "applied-uid",
            "planFingerprint": digest(5),
            "completedAt": "2026-01-01T00:00:00Z",
        }))
        .expect("applied");
        st.applied = Some(applied);
        assert_eq!(still_named(&st), vec!["applied", "current", "running"]);
        assert!(still_named(&PtahSchemaStatus::default()).is_empty());
    }
}
