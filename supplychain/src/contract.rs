//! Plan contract version 2: the source binding of a plan, the canonical JSON
//! every digest is taken over, and the plan fingerprint — the approval
//! identity — as the SHA-256 of the canonical JSON of everything a plan binds.
//!
//! # Canonical JSON
//!
//! [`canonical_json`] writes the subset of RFC 8785 (JCS) our documents use,
//! byte for byte as JCS would:
//!
//! * objects: members sorted by their names' UTF-16 code units (JCS §3.2.3),
//!   no duplicate names (a `serde_json` map has none);
//! * no whitespace outside strings; `:` and `,` only;
//! * strings: UTF-8, with `"` and `\` escaped as `\"` and `\\`, U+0008,
//!   U+0009, U+000A, U+000C, U+000D as `\b`, `\t`, `\n`, `\f`, `\r`, the other
//!   controls below U+0020 as `\u00xx` (lowercase hex), everything else
//!   literal (`/`, U+007F and non-ASCII included);
//! * numbers: **integers only**, within ±(2^53−1), written in plain decimal —
//!   exactly what JCS's ECMAScript number form gives for them. A float, or an
//!   integer outside that range, is refused rather than rounded;
//! * `true`, `false`, `null`.
//!
//! # What a plan binds
//!
//! Every document carries `"contract_version": 2` and a `plan_kind`, so a
//! schema plan and a migration plan never share a fingerprint. The source is
//! bound by kind ([`SourceBinding::document`]):
//!
//! | kind | bound | recorded as evidence only |
//! | --- | --- | --- |
//! | ConfigMap | ConfigMap UID, content digest, source policy UID + digest | snapshot name |
//! | Git | location digest (URL + path), content digest, source policy UID + digest | commit |
//! | OCI | artifact (manifest) digest, verification policy UID + digest, signer evidence digest | resolved reference |
//! | Flux | the Flux object's UID, Flux's revision, content digest; under a verification policy its UID + digest and the signer evidence digest | snapshot name, resolved reference |
//!
//! Flux's revision is bound, unlike a Git commit: the reviewer approved what
//! Flux named, and another revision is another plan even with equal files.
//!
//! The commit is evidence, not bound: a new commit that leaves the selected
//! files as they were keeps the plan (seed). The snapshot name derives from
//! bound inputs (owner UID, content digest).
//!
//! Besides the source, a schema plan binds its resource's UID (not its name),
//! the plan content digest, coordination and target identity digests, the
//! observed and desired state fingerprints, the `spec.policy` digest, the
//! execution binding (epoch, controller state version, Ptah version, executor
//! image, runner protocol version), the dialect, and the operator's reading
//! (destructive, privilege-change kinds, statement count). A migration plan
//! binds the ordered sequence, the history fingerprint and current version, and
//! the policy's transaction mode instead of the states and the reading.
//! Scheduling fields (`interval`, `suspend`, `execution.resources`,
//! `nodeSelector`, `podMetadata`, …) have no place in these documents, so
//! they can never change a fingerprint.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::manifest;

/// The contract version these documents follow.
pub const CONTRACT_VERSION: i64 = 2;
/// Largest integer canonical JSON carries (2^53 − 1).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// Why a document has no canonical form or no fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    /// A number is not an integer within ±(2^53−1).
    #[error("{path}: {number} is not an integer within ±(2^53-1)")]
    Number { path: String, number: String },
    /// The value does not serialize.
    #[error("does not serialize to JSON: {0}")]
    Serialize(String),
    /// A bound field is missing, empty or out of range.
    #[error("{field}: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

fn invalid(field: &'static str, reason: &'static str) -> ContractError {
    ContractError::Invalid { field, reason }
}

/// The canonical JSON bytes of a value (see the module doc).
pub fn canonical_json(value: &Value) -> Result<Vec<u8>, ContractError> {
    let mut out = Vec::new();
    write_value(value, &mut out, &mut String::from("$"))?;
    Ok(out)
}

/// The canonical JSON bytes of anything serializable.
pub fn to_canonical_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, ContractError> {
    let value = serde_json::to_value(value).map_err(|e| ContractError::Serialize(e.to_string()))?;
    canonical_json(&value)
}

/// `sha256:<hex>` of the canonical JSON of a value.
pub fn canonical_digest<T: Serialize + ?Sized>(value: &T) -> Result<String, ContractError> {
    Ok(crate::sha256_digest(&to_canonical_json(value)?))
}

fn write_value(v: &Value, out: &mut Vec<u8>, path: &mut String) -> Result<(), ContractError> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            let ok = n
                .as_i64()
                .filter(|i| (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(i));
            match ok {
                Some(i) => out.extend_from_slice(i.to_string().as_bytes()),
                None => {
                    return Err(ContractError::Number {
                        path: path.clone(),
                        number: n.to_string(),
                    });
                }
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                write_value(item, out, path)?;
                path.truncate(len);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push(b'{');
            for (i, (k, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                let len = path.len();
                path.push('.');
                path.push_str(k);
                write_value(item, out, path)?;
                path.truncate(len);
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// The kind of a source, spelt as the API spells it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms)]
pub enum SourceKind {
    /// A ConfigMap snapshot.
    ConfigMap,
    /// A Git commit.
    Git,
    /// An OCI artifact by digest.
    OCI,
    /// A Flux source's artifact, snapshotted.
    Flux,
}

/// A policy ConfigMap as bound: its UID and the SHA-256 of its key's bytes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    /// UID of the ConfigMap.
    pub uid: String,
    /// `sha256:<hex>` of the policy bytes.
    pub digest: String,
}

/// The evidence of an accepted signature, bound (as its digest) into every
/// plan computed from an OCI source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SignerEvidence {
    /// The authority of the policy that accepted the artifact.
    pub authority: Option<String>,
    /// Keyless signer: OIDC issuer of the certificate.
    pub issuer: Option<String>,
    /// Keyless signer: subject (SAN) of the certificate.
    pub subject: Option<String>,
    /// SHA-256 fingerprint of the public key or certificate.
    pub key_fingerprint: Option<String>,
    /// SHA-256 of the trusted root.
    pub trust_root_digest: Option<String>,
    /// Digest of the accepted signature (bundle or `.sig` manifest).
    pub signature_digest: Option<String>,
    /// Whether a transparency-log entry was verified.
    pub transparency_log_verified: Option<bool>,
}

impl SignerEvidence {
    /// `sha256:<hex>` of the canonical JSON of the evidence: every field, a
    /// missing one as `null`, names in snake case.
    pub fn digest(&self) -> Result<String, ContractError> {
        canonical_digest(self)
    }
}

/// The location digest of a Git source: `sha256:<hex>` of the canonical JSON
/// `{"path":<path>,"url":<url>}`, the URL exactly as given and the path in its
/// canonical spelling (`""` for the repository root; `./db/` is `db`). A
/// structured document, not a concatenation, so no URL and path pair can
/// collide with another.
pub fn git_location_digest(url: &str, path: Option<&str>) -> Result<String, ContractError> {
    if url.is_empty() {
        return Err(invalid("url", "is empty"));
    }
    let path = match path.map(|p| p.trim_matches('/')) {
        None | Some("") | Some(".") => String::new(),
        Some(p) => manifest::normalize_path(p)
            .map_err(|_| invalid("path", "is not a relative path without '..'"))?,
    };
    canonical_digest(&json!({ "path": path, "url": url }))
}

/// The source as a plan is bound to it: field for field the API's
/// `SourceBinding`, so the operator maps one onto the other. Which fields are
/// bound and which are evidence depends on the kind (see the module doc).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SourceBinding {
    /// The kind.
    pub kind: SourceKind,
    /// Content digest (ConfigMap, Git) or manifest digest (OCI).
    pub content_digest: String,
    /// UID of the source ConfigMap (ConfigMap).
    #[serde(
        rename = "configMapUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub config_map_uid: Option<String>,
    /// The snapshot's name (ConfigMap; evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_name: Option<String>,
    /// SHA-256 of URL and path (Git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location_digest: Option<String>,
    /// The commit (Git; evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The reference pinned by digest (OCI; evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_reference: Option<String>,
    /// UID of the source policy ConfigMap (ConfigMap, Git).
    #[serde(
        rename = "sourcePolicyUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub source_policy_uid: Option<String>,
    /// Digest of the source policy (ConfigMap, Git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_policy_digest: Option<String>,
    /// UID of the verification policy ConfigMap (OCI).
    #[serde(
        rename = "verificationPolicyUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub verification_policy_uid: Option<String>,
    /// Digest of the verification policy (OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_policy_digest: Option<String>,
    /// Digest of the [`SignerEvidence`] (OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_evidence_digest: Option<String>,
    /// UID of the Flux object (Flux).
    #[serde(
        rename = "fluxObjectUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub flux_object_uid: Option<String>,
    /// Flux's revision of the artifact (Flux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux_revision: Option<String>,
}

impl SourceBinding {
    fn empty(kind: SourceKind, content_digest: String) -> SourceBinding {
        SourceBinding {
            kind,
            content_digest,
            config_map_uid: None,
            snapshot_name: None,
            location_digest: None,
            commit: None,
            resolved_reference: None,
            source_policy_uid: None,
            source_policy_digest: None,
            verification_policy_uid: None,
            verification_policy_digest: None,
            signer_evidence_digest: None,
            flux_object_uid: None,
            flux_revision: None,
        }
    }

    fn with_source_policy(mut self, policy: Option<PolicyRef>) -> SourceBinding {
        if let Some(p) = policy {
            self.source_policy_uid = Some(p.uid);
            self.source_policy_digest = Some(p.digest);
        }
        self
    }

    /// A ConfigMap source: its UID and the snapshot's content digest.
    pub fn config_map(
        config_map_uid: &str,
        content_digest: &str,
        snapshot_name: &str,
        source_policy: Option<PolicyRef>,
    ) -> SourceBinding {
        let mut b = Self::empty(SourceKind::ConfigMap, content_digest.to_string());
        b.config_map_uid = Some(config_map_uid.to_string());
        b.snapshot_name = Some(snapshot_name.to_string());
        b.with_source_policy(source_policy)
    }

    /// A Git source: the digest of URL and path, the content digest, and the
    /// commit as evidence.
    pub fn git(
        url: &str,
        path: Option<&str>,
        commit: &str,
        content_digest: &str,
        source_policy: Option<PolicyRef>,
    ) -> Result<SourceBinding, ContractError> {
        let mut b = Self::empty(SourceKind::Git, content_digest.to_string());
        b.location_digest = Some(git_location_digest(url, path)?);
        b.commit = Some(commit.to_string());
        Ok(b.with_source_policy(source_policy))
    }

    /// An OCI source: the manifest digest, the verification policy and the
    /// evidence of the accepted signature.
    pub fn oci(
        resolved_reference: &str,
        artifact_digest: &str,
        verification_policy: PolicyRef,
        evidence: &SignerEvidence,
    ) -> Result<SourceBinding, ContractError> {
        let mut b = Self::empty(SourceKind::OCI, artifact_digest.to_string());
        b.resolved_reference = Some(resolved_reference.to_string());
        b.verification_policy_uid = Some(verification_policy.uid);
        b.verification_policy_digest = Some(verification_policy.digest);
        b.signer_evidence_digest = Some(evidence.digest()?);
        Ok(b)
    }

    /// A Flux source: the object's UID, Flux's revision and the snapshot's
    /// content digest, and under a verification policy the evidence of the
    /// signature accepted on the manifest Flux named.
    pub fn flux(
        object_uid: &str,
        revision: &str,
        content_digest: &str,
        snapshot_name: &str,
        verified: Option<(&str, PolicyRef, &SignerEvidence)>,
    ) -> Result<SourceBinding, ContractError> {
        let mut b = Self::empty(SourceKind::Flux, content_digest.to_string());
        b.flux_object_uid = Some(object_uid.to_string());
        b.flux_revision = Some(revision.to_string());
        b.snapshot_name = Some(snapshot_name.to_string());
        if let Some((reference, policy, evidence)) = verified {
            b.resolved_reference = Some(reference.to_string());
            b.verification_policy_uid = Some(policy.uid);
            b.verification_policy_digest = Some(policy.digest);
            b.signer_evidence_digest = Some(evidence.digest()?);
        }
        Ok(b)
    }

    fn verification(&self) -> Result<(Value, Value), ContractError> {
        match (
            &self.verification_policy_uid,
            &self.verification_policy_digest,
            &self.signer_evidence_digest,
        ) {
            (None, None, None) => Ok((Value::Null, Value::Null)),
            (Some(uid), Some(digest), Some(evidence)) => Ok((
                json!({
                    "uid": nonempty(uid, "source.verificationPolicyUID")?,
                    "digest": nonempty(digest, "source.verificationPolicyDigest")?,
                }),
                json!(nonempty(evidence, "source.signerEvidenceDigest")?),
            )),
            _ => Err(invalid(
                "source.verificationPolicyUID",
                "a verified source needs the policy's UID and digest and the signer evidence digest",
            )),
        }
    }

    fn source_policy(&self) -> Result<Value, ContractError> {
        match (&self.source_policy_uid, &self.source_policy_digest) {
            (None, None) => Ok(Value::Null),
            (Some(uid), Some(digest)) => Ok(json!({
                "uid": nonempty(uid, "source.sourcePolicyUID")?,
                "digest": nonempty(digest, "source.sourcePolicyDigest")?,
            })),
            _ => Err(invalid(
                "source.sourcePolicyUID",
                "the source policy needs both its UID and its digest",
            )),
        }
    }

    /// The bound part, as the plan document holds it (see the module doc).
    /// Fields of another kind are refused: a binding is one kind only.
    pub fn document(&self) -> Result<Value, ContractError> {
        let content = nonempty(&self.content_digest, "source.contentDigest")?;
        let foreign = |set: bool, field| {
            if set {
                Err(invalid(field, "belongs to another source kind"))
            } else {
                Ok(())
            }
        };
        match self.kind {
            SourceKind::ConfigMap | SourceKind::Git | SourceKind::OCI
                if self.flux_object_uid.is_some() || self.flux_revision.is_some() =>
            {
                Err(invalid(
                    "source.fluxObjectUID",
                    "belongs to another source kind",
                ))
            }
            SourceKind::ConfigMap => {
                foreign(self.location_digest.is_some(), "source.locationDigest")?;
                foreign(
                    self.verification_policy_uid.is_some(),
                    "source.verificationPolicyUID",
                )?;
                foreign(
                    self.signer_evidence_digest.is_some(),
                    "source.signerEvidenceDigest",
                )?;
                Ok(json!({
                    "kind": "ConfigMap",
                    "config_map_uid": required(&self.config_map_uid, "source.configMapUID")?,
                    "content_digest": content,
                    "source_policy": self.source_policy()?,
                }))
            }
            SourceKind::Git => {
                foreign(self.config_map_uid.is_some(), "source.configMapUID")?;
                foreign(
                    self.verification_policy_uid.is_some(),
                    "source.verificationPolicyUID",
                )?;
                foreign(
                    self.signer_evidence_digest.is_some(),
                    "source.signerEvidenceDigest",
                )?;
                Ok(json!({
                    "kind": "Git",
                    "location_digest": required(&self.location_digest, "source.locationDigest")?,
                    "content_digest": content,
                    "source_policy": self.source_policy()?,
                }))
            }
            SourceKind::OCI => {
                foreign(self.config_map_uid.is_some(), "source.configMapUID")?;
                foreign(self.location_digest.is_some(), "source.locationDigest")?;
                foreign(self.source_policy_uid.is_some(), "source.sourcePolicyUID")?;
                Ok(json!({
                    "kind": "OCI",
                    "artifact_digest": content,
                    "verification_policy": {
                        "uid": required(&self.verification_policy_uid, "source.verificationPolicyUID")?,
                        "digest": required(&self.verification_policy_digest, "source.verificationPolicyDigest")?,
                    },
                    "signer_evidence_digest": required(&self.signer_evidence_digest, "source.signerEvidenceDigest")?,
                }))
            }
            SourceKind::Flux => {
                foreign(self.config_map_uid.is_some(), "source.configMapUID")?;
                foreign(self.location_digest.is_some(), "source.locationDigest")?;
                foreign(self.source_policy_uid.is_some(), "source.sourcePolicyUID")?;
                let (policy, evidence) = self.verification()?;
                Ok(json!({
                    "kind": "Flux",
                    "object_uid": required(&self.flux_object_uid, "source.fluxObjectUID")?,
                    "revision": required(&self.flux_revision, "source.fluxRevision")?,
                    "content_digest": content,
                    "verification_policy": policy,
                    "signer_evidence_digest": evidence,
                }))
            }
        }
    }
}

fn nonempty<'a>(s: &'a str, field: &'static str) -> Result<&'a str, ContractError> {
    if s.is_empty() {
        Err(invalid(field, "is empty"))
    } else {
        Ok(s)
    }
}

fn required<'a>(s: &'a Option<String>, field: &'static str) -> Result<&'a str, ContractError> {
    nonempty(
        s.as_deref().ok_or_else(|| invalid(field, "is missing"))?,
        field,
    )
}

fn at_least_one(n: i64, field: &'static str) -> Result<i64, ContractError> {
    if (1..=MAX_SAFE_INTEGER).contains(&n) {
        Ok(n)
    } else {
        Err(invalid(field, "must be at least 1"))
    }
}

/// The execution components a plan is bound to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionBinding {
    /// `v1-<32 hex>`.
    pub epoch: String,
    /// Version of the manager's state semantics.
    pub controller_state_version: i64,
    /// Version of Ptah in the executor image.
    pub ptah_version: String,
    /// The executor image, by digest.
    pub executor_image: String,
    /// Version of the manager–runner protocol.
    pub runner_protocol_version: i64,
}

impl ExecutionBinding {
    fn document(&self) -> Result<Value, ContractError> {
        let epoch = nonempty(&self.epoch, "execution.epoch")?;
        let hex = epoch.strip_prefix("v1-").unwrap_or_default();
        if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(invalid(
                "execution.epoch",
                "expected v1- and 32 lowercase hex digits",
            ));
        }
        Ok(json!({
            "epoch": epoch,
            "controller_state_version": at_least_one(self.controller_state_version, "execution.controllerStateVersion")?,
            "ptah_version": nonempty(&self.ptah_version, "execution.ptahVersion")?,
            "executor_image": nonempty(&self.executor_image, "execution.executorImage")?,
            "runner_protocol_version": at_least_one(self.runner_protocol_version, "execution.runnerProtocolVersion")?,
        }))
    }
}

/// The digest of a resource's `spec.policy` block: `sha256:<hex>` of its
/// canonical JSON, as the API server stores it (defaults applied).
pub fn policy_fingerprint(policy: &Value) -> Result<String, ContractError> {
    canonical_digest(policy)
}

/// Everything a schema plan binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaPlanBinding {
    /// UID of the PtahSchema (its name is not bound).
    pub schema_uid: String,
    /// SHA-256 of the plan bytes.
    pub plan_content_digest: String,
    /// The source.
    pub source: SourceBinding,
    /// Coordination identity digest.
    pub coordination_digest: String,
    /// Target identity digest (derived in the Pod).
    pub target_identity_digest: String,
    /// Observed state the plan starts from.
    pub actual_state_fingerprint: String,
    /// Declared state the plan leads to.
    pub desired_state_fingerprint: String,
    /// Digest of `spec.policy` ([`policy_fingerprint`]).
    pub policy_fingerprint: String,
    /// The execution components.
    pub execution: ExecutionBinding,
    /// SQL dialect of the statements.
    pub dialect: String,
    /// The operator's reading: destructive.
    pub destructive: bool,
    /// The operator's reading: privilege-change kinds (a set: trimmed, sorted,
    /// deduplicated before binding).
    pub privilege_changes: Vec<String>,
    /// The operator's reading: statement count.
    pub statement_count: i64,
}

impl SchemaPlanBinding {
    /// The canonical document (a JSON value).
    pub fn document(&self) -> Result<Value, ContractError> {
        let mut privileges: Vec<&str> = self
            .privilege_changes
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .collect();
        privileges.sort_unstable();
        privileges.dedup();
        let mut doc = Map::new();
        doc.insert("contract_version".into(), json!(CONTRACT_VERSION));
        doc.insert("plan_kind".into(), json!("schema"));
        doc.insert(
            "schema_uid".into(),
            json!(nonempty(&self.schema_uid, "schemaUID")?),
        );
        doc.insert(
            "plan_content_digest".into(),
            json!(nonempty(&self.plan_content_digest, "contentDigest")?),
        );
        doc.insert("source".into(), self.source.document()?);
        doc.insert(
            "coordination_digest".into(),
            json!(nonempty(&self.coordination_digest, "coordinationDigest")?),
        );
        doc.insert(
            "target_identity_digest".into(),
            json!(nonempty(
                &self.target_identity_digest,
                "targetIdentityDigest"
            )?),
        );
        doc.insert(
            "actual_state_fingerprint".into(),
            json!(nonempty(
                &self.actual_state_fingerprint,
                "actualStateFingerprint"
            )?),
        );
        doc.insert(
            "desired_state_fingerprint".into(),
            json!(nonempty(
                &self.desired_state_fingerprint,
                "desiredStateFingerprint"
            )?),
        );
        doc.insert(
            "policy_fingerprint".into(),
            json!(nonempty(&self.policy_fingerprint, "policyFingerprint")?),
        );
        doc.insert("execution".into(), self.execution.document()?);
        doc.insert("dialect".into(), json!(nonempty(&self.dialect, "dialect")?));
        doc.insert("destructive".into(), json!(self.destructive));
        doc.insert("privilege_changes".into(), json!(privileges));
        doc.insert(
            "statement_count".into(),
            json!(at_least_one(self.statement_count, "statementCount")?),
        );
        Ok(Value::Object(doc))
    }

    /// The canonical JSON bytes.
    pub fn canonical_json(&self) -> Result<Vec<u8>, ContractError> {
        canonical_json(&self.document()?)
    }

    /// The fingerprint: `sha256:<hex>` of [`Self::canonical_json`].
    pub fn fingerprint(&self) -> Result<String, ContractError> {
        Ok(crate::sha256_digest(&self.canonical_json()?))
    }
}

/// One migration of a migration plan's sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedMigration {
    /// Version.
    pub version: i64,
    /// The version as written in the file name, when it differs.
    pub version_key: Option<String>,
    /// Checksum of the migration's files.
    pub checksum: String,
    /// A checkpoint migration.
    pub checkpoint: bool,
    /// Declared transaction mode (unset is its own value).
    pub transaction_mode: Option<String>,
}

/// Everything a migration plan binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationPlanBinding {
    /// UID of the PtahMigration.
    pub migration_uid: String,
    /// The sequence, in the order it runs.
    pub migrations: Vec<PlannedMigration>,
    /// Fingerprint of the history reading the sequence continues.
    pub history_fingerprint: String,
    /// The history's current version.
    pub current_version: i64,
    /// The source.
    pub source: SourceBinding,
    /// Coordination identity digest.
    pub coordination_digest: String,
    /// Target identity digest.
    pub target_identity_digest: String,
    /// Digest of `spec.policy`.
    pub policy_fingerprint: String,
    /// The policy's transaction mode (unset is its own value).
    pub transaction_mode: Option<String>,
    /// The execution components.
    pub execution: ExecutionBinding,
}

impl MigrationPlanBinding {
    /// The canonical document (a JSON value).
    pub fn document(&self) -> Result<Value, ContractError> {
        if self.migrations.is_empty() {
            return Err(invalid("migrations", "is empty"));
        }
        let mut sequence = Vec::with_capacity(self.migrations.len());
        for m in &self.migrations {
            sequence.push(json!({
                "version": at_least_one(m.version, "migrations.version")?,
                "version_key": m.version_key,
                "checksum": nonempty(&m.checksum, "migrations.checksum")?,
                "checkpoint": m.checkpoint,
                "transaction_mode": m.transaction_mode,
            }));
        }
        if !(0..=MAX_SAFE_INTEGER).contains(&self.current_version) {
            return Err(invalid("currentVersion", "must be at least 0"));
        }
        Ok(json!({
            "contract_version": CONTRACT_VERSION,
            "plan_kind": "migration",
            "migration_uid": nonempty(&self.migration_uid, "migrationUID")?,
            "migrations": sequence,
            "history_fingerprint": nonempty(&self.history_fingerprint, "historyFingerprint")?,
            "current_version": self.current_version,
            "source": self.source.document()?,
            "coordination_digest": nonempty(&self.coordination_digest, "coordinationDigest")?,
            "target_identity_digest": nonempty(&self.target_identity_digest, "targetIdentityDigest")?,
            "policy_fingerprint": nonempty(&self.policy_fingerprint, "policyFingerprint")?,
            "transaction_mode": self.transaction_mode,
            "execution": self.execution.document()?,
        }))
    }

    /// The canonical JSON bytes.
    pub fn canonical_json(&self) -> Result<Vec<u8>, ContractError> {
        canonical_json(&self.document()?)
    }

    /// The fingerprint: `sha256:<hex>` of [`Self::canonical_json`].
    pub fn fingerprint(&self) -> Result<String, ContractError> {
        Ok(crate::sha256_digest(&self.canonical_json()?))
    }
}

#[cfg(test)]
mod tests;
