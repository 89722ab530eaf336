//! The sigstore verification policy of OCI sources, and its evaluation
//! against a digest-pinned artifact (the Verify step).
//!
//! # The policy format
//!
//! A YAML (or JSON) document, read from the ConfigMap that
//! `verificationPolicyFrom` selects and bound by the SHA-256 of its bytes:
//!
//! ```yaml
//! apiVersion: supplychain.ptah.run/v1alpha1
//! kind: VerificationPolicy
//! # The artifact types accepted (empty: any Ptah type the source expects).
//! artifactTypes: [application/vnd.stokaro.ptah.schema.v1]
//! # Manifest annotations that must be present and non-empty.
//! requiredAnnotations: [org.opencontainers.image.source]
//! signatures:
//!   match: any            # any | all of the authorities below
//!   formats: [bundle, legacy]   # where signatures are looked for
//! authorities:            # empty: no signature is required
//!   - name: release-key
//!     key:
//!       pem: |
//!         -----BEGIN PUBLIC KEY-----
//!         ...
//!     transparencyLog: optional   # required | optional (keys: optional)
//!   - name: ci
//!     keyless:
//!       identities:       # any of them; exact or regular expression each
//!         - issuer: https://token.actions.githubusercontent.com
//!           subjectRegExp: ^https://github\.com/acme/schemas/\.github/workflows/.*$
//!     trustedRoot: |      # sigstore trusted_root.json, offline
//!       {"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", ...}
//!     transparencyLog: required   # keyless: required unless stated
//! ```
//!
//! Semantics:
//!
//! * `artifactTypes` and `requiredAnnotations` are checked on the manifest
//!   read by digest, on top of the source's own artifact type check
//!   ([`crate::oci::check_artifact`]).
//! * With `match: any` one authority must be satisfied, with `all` every one.
//!   An authority is satisfied by one signature (of an allowed format) whose
//!   content names this artifact's digest and that it verifies.
//! * `key`: a cosign public key (PEM; ECDSA, RSA or Ed25519). The evidence
//!   names the SHA-256 fingerprint of the key's DER SubjectPublicKeyInfo.
//! * `keyless`: the signature's certificate must chain, for code signing,
//!   to a certificate authority of `trustedRoot`, and its SAN (URI or email)
//!   and Fulcio OIDC issuer (extension 1.3.6.1.4.1.57264.1.8, or the legacy
//!   .1.1) must match one identity. An identity gives `issuer` or
//!   `issuerRegExp` and `subject` or `subjectRegExp`; a regular expression
//!   must match the whole value (it is anchored). sigstore-rs matches URI
//!   subjects and issuers only exactly: regex identities are ours.
//! * `transparencyLog: required`: the signature must carry a transparency-log
//!   entry, verified offline against the Rekor keys of `trustedRoot` by
//!   sigstore-rs's cosign path (the SET; for bundles also the Merkle
//!   inclusion proof, the checkpoint and the entry's binding to the bundle).
//!   For legacy `.sig` signatures sigstore-rs checks only the SET, so we also
//!   check that the logged entry names this signature and the SHA-256 of its
//!   payload. A keyless certificate is then checked at the entry's
//!   integrated time. A signature without an entry is refused.
//! * `transparencyLog: optional`: no entry is looked at, and a keyless
//!   certificate is checked at the time of verification (there is no trusted
//!   signing time), so a short-lived Fulcio certificate needs `required`.
//! * Formats: `bundle` is a sigstore bundle (v0.3, DSSE over an in-toto
//!   statement naming the digest) stored as an OCI 1.1 referrer, found
//!   through the referrers API or its `sha256-<hex>` tag fallback; `legacy`
//!   is cosign's simple-signing payload under the `sha256-<hex>.sig` tag.
//!   Signatures are checked by our code (keys via sigstore-rs's
//!   `CosignVerificationKey`, certificate chains via webpki), because
//!   sigstore-rs 0.15 refuses bundles without a log entry or certificate.
//!
//! Known limits (sigstore-rs 0.15): no SCT check, no RFC 3161 timestamps,
//! no Rekor v2 entries (they have no SET); a keyed sigstore bundle (public
//! key hint, no certificate) cannot have its log entry verified, so it is
//! refused when the log is required. All certificates of `trustedRoot`'s
//! certificate authorities are trust anchors.
//!
//! A refusal names the rule: `artifactTypes`, `requiredAnnotations[<name>]`,
//! `authorities[<name>]` (with the reason of the signature that came
//! closest), `signatures.match`.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use oci_client::Reference;
use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sigstore::crypto::{CosignVerificationKey, Signature};
use x509_cert::der::{Decode, Encode};

use crate::oci::{
    ArtifactKind, OciError, OciSource, check_artifact, check_referrer, declared_artifact_type,
};

pub const API_VERSION: &str = "supplychain.ptah.run/v1alpha1";
pub const KIND: &str = "VerificationPolicy";

/// Media type of a sigstore bundle v0.3 (cosign v3's default signature).
pub const SIGSTORE_BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// Layer media type of a legacy cosign signature.
pub const SIMPLE_SIGNING_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const COSIGN_SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const COSIGN_CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
const COSIGN_CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
const COSIGN_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// Fulcio's OIDC issuer extensions: .1.8 (DER UTF8String), .1.1 (raw).
const OID_FULCIO_ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
const OID_FULCIO_ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
const OID_SUBJECT_ALT_NAME: &str = "2.5.29.17";
/// id-kp-codeSigning, DER content of the OID.
const EKU_CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// Bounds on signature material read from the registry.
const MAX_SIGNATURE_BLOB: u64 = 1024 * 1024;
const MAX_REFERRERS: usize = 64;

/// The policy document (see the module documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerificationPolicy {
    /// `supplychain.ptah.run/v1alpha1`.
    pub api_version: String,
    /// `VerificationPolicy`.
    pub kind: String,
    /// Accepted artifact types; empty accepts the type the source expects.
    #[serde(default)]
    pub artifact_types: Vec<String>,
    /// Manifest annotations that must be present and non-empty.
    #[serde(default)]
    pub required_annotations: Vec<String>,
    #[serde(default)]
    pub signatures: SignatureRules,
    /// Who may sign. Empty: no signature is required.
    #[serde(default)]
    pub authorities: Vec<Authority>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignatureRules {
    /// `any` authority suffices, or `all` must be satisfied.
    #[serde(default, rename = "match")]
    pub match_: Match,
    /// Where signatures are looked for; both by default.
    #[serde(default = "all_formats")]
    pub formats: Vec<SignatureFormat>,
}

impl Default for SignatureRules {
    fn default() -> Self {
        SignatureRules {
            match_: Match::Any,
            formats: all_formats(),
        }
    }
}

fn all_formats() -> Vec<SignatureFormat> {
    vec![SignatureFormat::Bundle, SignatureFormat::Legacy]
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Match {
    #[default]
    Any,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SignatureFormat {
    /// A sigstore bundle stored as an OCI 1.1 referrer.
    Bundle,
    /// A cosign simple-signing payload under the `sha256-<hex>.sig` tag.
    Legacy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TransparencyLog {
    Required,
    Optional,
}

/// One authority: a key or keyless identities.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Authority {
    /// Names the authority in refusals and evidence.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyAuthority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyless: Option<KeylessAuthority>,
    /// A sigstore `trusted_root.json` (offline): certificate authorities for
    /// keyless, Rekor keys for a required transparency log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root: Option<String>,
    /// Keys: `optional` unless stated; keyless: `required` unless stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparency_log: Option<TransparencyLog>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyAuthority {
    /// A PEM public key (cosign.pub).
    pub pem: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeylessAuthority {
    /// Any of these identities.
    pub identities: Vec<Identity>,
}

/// An identity: `issuer` or `issuerRegExp`, and `subject` or
/// `subjectRegExp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(
        default,
        rename = "issuerRegExp",
        skip_serializing_if = "Option::is_none"
    )]
    pub issuer_regexp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(
        default,
        rename = "subjectRegExp",
        skip_serializing_if = "Option::is_none"
    )]
    pub subject_regexp: Option<String>,
}

/// A policy that does not parse or is not consistent: names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("verification policy, {field}: {reason}")]
pub struct PolicyError {
    pub field: String,
    pub reason: String,
}

fn policy_error(field: impl Into<String>, reason: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The JSON Schema of the policy document.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(VerificationPolicy)).unwrap_or_default()
}

/// A string matcher of an identity: exact or an anchored regex.
#[derive(Clone, Debug)]
enum Matcher {
    Exact(String),
    Regex(Regex),
}

impl Matcher {
    fn new(
        field: &str,
        exact: &Option<String>,
        regexp: &Option<String>,
    ) -> Result<Matcher, PolicyError> {
        match (exact, regexp) {
            (Some(exact), None) => Ok(Matcher::Exact(exact.clone())),
            (None, Some(re)) => Regex::new(&format!("^(?:{re})$"))
                .map(Matcher::Regex)
                .map_err(|e| policy_error(format!("{field}RegExp"), e.to_string())),
            _ => Err(policy_error(
                field,
                format!("give exactly one of {field} and {field}RegExp"),
            )),
        }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Matcher::Exact(s) => s == value,
            Matcher::Regex(re) => re.is_match(value),
        }
    }
}

#[derive(Clone, Debug)]
struct CompiledIdentity {
    issuer: Matcher,
    subject: Matcher,
}

#[derive(Clone)]
struct TrustRoot {
    digest: String,
    /// DER certificates of the certificate authorities.
    fulcio_certs: Vec<Vec<u8>>,
    json: Vec<u8>,
}

#[derive(Clone)]
enum CompiledAuthorityKind {
    Key {
        key: CosignVerificationKey,
        der: Vec<u8>,
    },
    Keyless {
        identities: Vec<CompiledIdentity>,
    },
}

#[derive(Clone)]
struct CompiledAuthority {
    name: String,
    kind: CompiledAuthorityKind,
    trust_root: Option<TrustRoot>,
    tlog_required: bool,
}

/// A parsed, checked policy with its digest.
#[derive(Clone)]
pub struct CompiledPolicy {
    pub policy: VerificationPolicy,
    /// `sha256:<hex>` of the policy bytes as read.
    pub digest: String,
    authorities: Vec<CompiledAuthority>,
}

impl fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledPolicy")
            .field("digest", &self.digest)
            .field("policy", &self.policy)
            .finish()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The DER bodies of the PEM blocks of `label` in `text`.
fn pem_blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = vec![];
    let mut rest = text;
    while let Some(start) = rest.find(&begin) {
        let after = &rest[start + begin.len()..];
        let stop = after
            .find(&end)
            .ok_or_else(|| format!("a {label} PEM block has no END line"))?;
        let body: String = after[..stop]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        out.push(
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .map_err(|_| format!("a {label} PEM block is not base64"))?,
        );
        rest = &after[stop + end.len()..];
    }
    Ok(out)
}

fn parse_trust_root(field: &str, json: &str) -> Result<TrustRoot, PolicyError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| policy_error(field, format!("not JSON: {e}")))?;
    let mut fulcio_certs = vec![];
    for ca in value["certificateAuthorities"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for cert in ca["certChain"]["certificates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let raw = cert["rawBytes"]
                .as_str()
                .ok_or_else(|| policy_error(field, "a certificate without rawBytes"))?;
            let der = base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map_err(|_| policy_error(field, "a certificate's rawBytes is not base64"))?;
            x509_cert::Certificate::from_der(&der)
                .map_err(|e| policy_error(field, format!("a certificate does not parse: {e}")))?;
            fulcio_certs.push(der);
        }
    }
    Ok(TrustRoot {
        digest: sha256_hex(json.as_bytes()),
        fulcio_certs,
        json: json.as_bytes().to_vec(),
    })
}

impl CompiledPolicy {
    /// Parses and checks a policy document (YAML or JSON).
    pub fn parse(bytes: &[u8]) -> Result<CompiledPolicy, PolicyError> {
        let text =
            std::str::from_utf8(bytes).map_err(|_| policy_error("(document)", "not UTF-8"))?;
        let policy: VerificationPolicy =
            serde_saphyr::from_str(text).map_err(|e| policy_error("(document)", e.to_string()))?;
        if policy.api_version != API_VERSION {
            return Err(policy_error(
                "apiVersion",
                format!("{:?}, expected {API_VERSION}", policy.api_version),
            ));
        }
        if policy.kind != KIND {
            return Err(policy_error(
                "kind",
                format!("{:?}, expected {KIND}", policy.kind),
            ));
        }
        if policy.signatures.formats.is_empty() {
            return Err(policy_error("signatures.formats", "empty"));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut authorities = vec![];
        for (i, a) in policy.authorities.iter().enumerate() {
            let field = format!("authorities[{i}]");
            if a.name.is_empty() || !names.insert(a.name.clone()) {
                return Err(policy_error(format!("{field}.name"), "empty or repeated"));
            }
            let trust_root = a
                .trusted_root
                .as_deref()
                .map(|json| parse_trust_root(&format!("{field}.trustedRoot"), json))
                .transpose()?;
            let kind = match (&a.key, &a.keyless) {
                (Some(key), None) => {
                    let der = pem_blocks(&key.pem, "PUBLIC KEY")
                        .map_err(|e| policy_error(format!("{field}.key.pem"), e))?
                        .into_iter()
                        .next()
                        .ok_or_else(|| {
                            policy_error(format!("{field}.key.pem"), "no PUBLIC KEY PEM block")
                        })?;
                    let key = CosignVerificationKey::try_from_der(&der)
                        .map_err(|e| policy_error(format!("{field}.key.pem"), e.to_string()))?;
                    CompiledAuthorityKind::Key { key, der }
                }
                (None, Some(keyless)) => {
                    if trust_root
                        .as_ref()
                        .is_none_or(|r| r.fulcio_certs.is_empty())
                    {
                        return Err(policy_error(
                            format!("{field}.trustedRoot"),
                            "keyless needs a trusted root with a certificate authority",
                        ));
                    }
                    if keyless.identities.is_empty() {
                        return Err(policy_error(format!("{field}.keyless.identities"), "empty"));
                    }
                    let identities = keyless
                        .identities
                        .iter()
                        .enumerate()
                        .map(|(j, id)| {
                            let f = format!("{field}.keyless.identities[{j}]");
                            Ok(CompiledIdentity {
                                issuer: Matcher::new("issuer", &id.issuer, &id.issuer_regexp)
                                    .map_err(|e| {
                                        policy_error(format!("{f}.{}", e.field), e.reason)
                                    })?,
                                subject: Matcher::new("subject", &id.subject, &id.subject_regexp)
                                    .map_err(|e| {
                                    policy_error(format!("{f}.{}", e.field), e.reason)
                                })?,
                            })
                        })
                        .collect::<Result<Vec<_>, PolicyError>>()?;
                    CompiledAuthorityKind::Keyless { identities }
                }
                _ => {
                    return Err(policy_error(field, "give exactly one of key and keyless"));
                }
            };
            let tlog_required = match (a.transparency_log, &kind) {
                (Some(t), _) => t == TransparencyLog::Required,
                (None, CompiledAuthorityKind::Key { .. }) => false,
                (None, CompiledAuthorityKind::Keyless { .. }) => true,
            };
            if tlog_required && trust_root.is_none() {
                return Err(policy_error(
                    format!("{field}.trustedRoot"),
                    "a required transparency log needs a trusted root with Rekor keys",
                ));
            }
            authorities.push(CompiledAuthority {
                name: a.name.clone(),
                kind,
                trust_root,
                tlog_required,
            });
        }
        Ok(CompiledPolicy {
            digest: sha256_hex(bytes),
            policy,
            authorities,
        })
    }
}

/// Who signed, as the evidence records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Signer {
    /// A cosign key: SHA-256 of its DER SubjectPublicKeyInfo.
    Key { key_fingerprint: String },
    /// A keyless identity: its issuer and subject, and the SHA-256 of the
    /// DER certificate.
    Identity {
        issuer: String,
        subject: String,
        certificate_fingerprint: String,
    },
}

/// One satisfied authority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignerEvidence {
    pub authority: String,
    pub format: SignatureFormat,
    pub signer: Signer,
    /// Digest of the OCI manifest that holds the signature.
    pub signature_manifest_digest: String,
    /// SHA-256 of the raw signature bytes.
    pub signature_digest: String,
    /// SHA-256 of the trusted root's bytes, where one was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust_root_digest: Option<String>,
    /// Whether a transparency-log entry was verified.
    pub transparency_log: bool,
}

/// What Verify answers on success: bound into every plan made from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedEvidence {
    pub policy_digest: String,
    pub artifact_digest: String,
    pub artifact_type: String,
    pub signatures: Vec<SignerEvidence>,
}

/// A refusal: the rule that refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("refused by {rule}: {reason}")]
pub struct Refusal {
    pub rule: String,
    pub reason: String,
}

/// Why Verify gave no evidence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyFailure {
    /// The policy refused the artifact, naming the rule: a verdict that
    /// holds until an input changes.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The registry was not there to answer (no connection, a timeout, a
    /// 5xx or 429): a failed read, retried, never a refusal.
    #[error("the registry could not be read: {0}")]
    Unavailable(String),
}

/// A read of the registry that failed: unavailable, or a refusal of `rule`.
fn read_failed(rule: &str, e: OciError) -> VerifyFailure {
    if e.is_unavailable() {
        VerifyFailure::Unavailable(e.to_string())
    } else {
        VerifyFailure::Refused(refusal(rule, e.to_string()))
    }
}

fn refusal(rule: impl Into<String>, reason: impl Into<String>) -> Refusal {
    Refusal {
        rule: rule.into(),
        reason: reason.into(),
    }
}

/// A signature found for the artifact, before any authority looked at it.
#[derive(Clone, Debug)]
struct Candidate {
    format: SignatureFormat,
    manifest_digest: String,
    /// What was signed: the simple-signing payload, or the DSSE PAE.
    message: Vec<u8>,
    signature: Vec<u8>,
    certificate: Option<Vec<u8>>,
    chain: Vec<Vec<u8>>,
    has_tlog: bool,
    /// The legacy Rekor bundle annotation (SET + entry), as stored.
    rekor_bundle: Option<String>,
}

/// Verify: evaluates `policy` against the artifact `digest` of `source`,
/// which must be of `expected` kind. Answers the evidence, the refusal, or
/// that the registry could not be read.
pub async fn verify(
    source: &OciSource,
    digest: &str,
    expected: ArtifactKind,
    policy: &CompiledPolicy,
) -> Result<VerifiedEvidence, VerifyFailure> {
    let fetched = source
        .fetch_manifest(digest)
        .await
        .map_err(|e| read_failed("artifact", e))?;
    check_artifact(&fetched, expected).map_err(|e| refusal("artifactType", e.to_string()))?;
    let artifact_type = declared_artifact_type(&fetched.manifest)
        .unwrap_or_default()
        .to_string();
    if !policy.policy.artifact_types.is_empty()
        && !policy.policy.artifact_types.contains(&artifact_type)
    {
        return Err(refusal(
            "artifactTypes",
            format!(
                "{artifact_type} is not one of {}",
                policy.policy.artifact_types.join(", ")
            ),
        )
        .into());
    }
    let annotations = fetched.manifest.annotations.clone().unwrap_or_default();
    for name in &policy.policy.required_annotations {
        if annotations.get(name).is_none_or(|v| v.trim().is_empty()) {
            return Err(refusal(
                format!("requiredAnnotations[{name}]"),
                "absent or empty on the manifest",
            )
            .into());
        }
    }
    let mut evidence = VerifiedEvidence {
        policy_digest: policy.digest.clone(),
        artifact_digest: digest.to_string(),
        artifact_type,
        signatures: vec![],
    };
    if policy.authorities.is_empty() {
        return Ok(evidence);
    }

    let mut notes = vec![];
    let candidates = discover(
        source,
        digest,
        &policy.policy.signatures.formats,
        &mut notes,
    )
    .await
    .map_err(VerifyFailure::Unavailable)?;
    let mut failures: Vec<Refusal> = vec![];
    for authority in &policy.authorities {
        match satisfy(source, digest, authority, &candidates).await {
            Ok(found) => evidence.signatures.push(found),
            Err(reason) => {
                failures.push(refusal(format!("authorities[{}]", authority.name), reason))
            }
        }
    }
    let satisfied = match policy.policy.signatures.match_ {
        Match::Any => !evidence.signatures.is_empty(),
        Match::All => failures.is_empty(),
    };
    if satisfied {
        return Ok(evidence);
    }
    let mut first = failures
        .into_iter()
        .next()
        .unwrap_or_else(|| refusal("signatures.match", "no authority is satisfied"));
    if candidates.is_empty() {
        first.reason = format!("the artifact has no signature ({})", notes.join("; "));
        if notes.is_empty() {
            first.reason = "the artifact has no signature".into();
        }
    }
    Err(first.into())
}

fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Why a signature was not read: the registry was not there to answer,
/// or what it answered (a note beside a refusal).
enum Missed {
    Unavailable(String),
    Note(String),
}

impl Missed {
    fn of(e: OciError) -> Missed {
        if e.is_unavailable() {
            Missed::Unavailable(e.to_string())
        } else {
            Missed::Note(e.to_string())
        }
    }
}

/// Finds the signatures of `digest` in the allowed formats. What cannot be
/// read or does not name this digest is left out, with a note; a registry
/// that was not there to answer fails the whole read, for a signature it
/// would have shown is not a missing one.
async fn discover(
    source: &OciSource,
    digest: &str,
    formats: &[SignatureFormat],
    notes: &mut Vec<String>,
) -> Result<Vec<Candidate>, String> {
    let mut out = vec![];
    if formats.contains(&SignatureFormat::Legacy) {
        match legacy_signatures(source, digest).await {
            Ok(mut found) => out.append(&mut found),
            Err(Missed::Note(note)) => notes.push(format!("legacy: {note}")),
            Err(Missed::Unavailable(why)) => return Err(why),
        }
    }
    if formats.contains(&SignatureFormat::Bundle) {
        match bundle_signatures(source, digest, notes).await {
            Ok(mut found) => out.append(&mut found),
            Err(Missed::Note(note)) => notes.push(format!("bundle: {note}")),
            Err(Missed::Unavailable(why)) => return Err(why),
        }
    }
    Ok(out)
}

fn digest_reference(source: &OciSource, digest: &str) -> Reference {
    source.reference().pinned(digest).client_reference()
}

async fn legacy_signatures(source: &OciSource, digest: &str) -> Result<Vec<Candidate>, Missed> {
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let tagged = source.reference().client_reference_with_tag(&tag);
    let sig_digest = source
        .client()
        .fetch_manifest_digest(&tagged, &source.registry_auth())
        .await
        .map_err(|e| source.registry_error("signature tag read", &tagged, e))
        .map_err(Missed::of)?;
    let reference = digest_reference(source, &sig_digest);
    let manifest = source
        .fetch_manifest_of(&reference, &sig_digest)
        .await
        .map_err(Missed::of)?;
    let mut out = vec![];
    for layer in &manifest.manifest.layers {
        if layer.media_type != SIMPLE_SIGNING_TYPE {
            continue;
        }
        let annotations = layer.annotations.clone().unwrap_or_default();
        let Some(signature) = annotations
            .get(COSIGN_SIGNATURE_ANNOTATION)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        else {
            continue;
        };
        let payload = source
            .fetch_blob(&reference, layer, MAX_SIGNATURE_BLOB)
            .await
            .map_err(Missed::of)?;
        let names_digest = serde_json::from_slice::<serde_json::Value>(&payload)
            .ok()
            .and_then(|v| {
                v["critical"]["image"]["docker-manifest-digest"]
                    .as_str()
                    .map(|d| d == digest)
            })
            .unwrap_or(false);
        if !names_digest {
            continue;
        }
        let certificate = annotations
            .get(COSIGN_CERTIFICATE_ANNOTATION)
            .and_then(|pem| pem_blocks(pem, "CERTIFICATE").ok())
            .and_then(|certs| certs.into_iter().next());
        let chain = annotations
            .get(COSIGN_CHAIN_ANNOTATION)
            .and_then(|pem| pem_blocks(pem, "CERTIFICATE").ok())
            .unwrap_or_default();
        out.push(Candidate {
            format: SignatureFormat::Legacy,
            manifest_digest: sig_digest.clone(),
            message: payload,
            signature,
            certificate,
            chain,
            has_tlog: annotations.contains_key(COSIGN_BUNDLE_ANNOTATION),
            rekor_bundle: annotations.get(COSIGN_BUNDLE_ANNOTATION).cloned(),
        });
    }
    Ok(out)
}

fn b64(value: &serde_json::Value) -> Option<Vec<u8>> {
    value
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
}

/// A sigstore bundle v0.3 of `digest` as a candidate, or why not.
fn bundle_candidate(
    bytes: &[u8],
    digest: &str,
    manifest_digest: &str,
) -> Result<Candidate, String> {
    let bundle: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let envelope = &bundle["dsseEnvelope"];
    if envelope.is_null() {
        return Err(
            "dsseEnvelope: missing, not a DSSE bundle (a message signature cannot name an OCI digest)"
                .into(),
        );
    }
    let payload_type = envelope["payloadType"].as_str().unwrap_or_default();
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(format!(
            "dsseEnvelope.payloadType: {payload_type:?} is not {IN_TOTO_PAYLOAD_TYPE}"
        ));
    }
    let payload =
        b64(&envelope["payload"]).ok_or("dsseEnvelope.payload: missing, or not base64")?;
    let signatures = envelope["signatures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let [signature] = signatures.as_slice() else {
        return Err(format!(
            "dsseEnvelope.signatures: {} DSSE signatures, not one",
            signatures.len()
        ));
    };
    let signature =
        b64(&signature["sig"]).ok_or("dsseEnvelope.signatures[0].sig: missing, or not base64")?;
    let statement: serde_json::Value = serde_json::from_slice(&payload)
        .map_err(|e| format!("dsseEnvelope.payload: not an in-toto statement: {e}"))?;
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let names_digest = statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["digest"]["sha256"].as_str() == Some(hex));
    if !names_digest {
        return Err("dsseEnvelope.payload: its in-toto subject is another digest".into());
    }
    let material = &bundle["verificationMaterial"];
    let (certificate, chain) = if let Some(der) = b64(&material["certificate"]["rawBytes"]) {
        (Some(der), vec![])
    } else if let Some(certs) = material["x509CertificateChain"]["certificates"].as_array() {
        let mut ders: Vec<Vec<u8>> = certs.iter().filter_map(|c| b64(&c["rawBytes"])).collect();
        if ders.is_empty() {
            (None, vec![])
        } else {
            let leaf = ders.remove(0);
            (Some(leaf), ders)
        }
    } else {
        (None, vec![])
    };
    let has_tlog = material["tlogEntries"]
        .as_array()
        .is_some_and(|entries| !entries.is_empty());
    Ok(Candidate {
        format: SignatureFormat::Bundle,
        manifest_digest: manifest_digest.to_string(),
        message: pae(payload_type, &payload),
        signature,
        certificate,
        chain,
        has_tlog,
        rekor_bundle: None,
    })
}

async fn bundle_signatures(
    source: &OciSource,
    digest: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<Candidate>, Missed> {
    let pinned = digest_reference(source, digest);
    source
        .client()
        .store_auth_if_needed(pinned.resolve_registry(), &source.registry_auth())
        .await;
    // The referrers API, or the `sha256-<hex>` tag where it answers 404.
    let index = source
        .client()
        .pull_referrers(&pinned, None)
        .await
        .map_err(|e| source.registry_error("referrers", &pinned, e))
        .map_err(Missed::of)?;
    let mut out = vec![];
    for descriptor in index
        .manifests
        .iter()
        .filter(|d| d.artifact_type.as_deref() == Some(SIGSTORE_BUNDLE_TYPE))
        .take(MAX_REFERRERS)
    {
        let reference = digest_reference(source, &descriptor.digest);
        let manifest = match source
            .fetch_manifest_of(&reference, &descriptor.digest)
            .await
        {
            Ok(m) => m,
            Err(e) if e.is_unavailable() => return Err(Missed::of(e)),
            Err(e) => {
                notes.push(format!("bundle {}: {e}", descriptor.digest));
                continue;
            }
        };
        if let Err(e) = check_referrer(&manifest, digest) {
            notes.push(format!("bundle {}: {e}", descriptor.digest));
            continue;
        }
        for layer in &manifest.manifest.layers {
            if layer.media_type != SIGSTORE_BUNDLE_TYPE {
                continue;
            }
            let bytes = match source
                .fetch_blob(&reference, layer, MAX_SIGNATURE_BLOB)
                .await
            {
                Ok(b) => b,
                Err(e) if e.is_unavailable() => return Err(Missed::of(e)),
                Err(e) => {
                    notes.push(format!("bundle {}: {e}", descriptor.digest));
                    continue;
                }
            };
            match bundle_candidate(&bytes, digest, &descriptor.digest) {
                Ok(c) => out.push(c),
                Err(e) => notes.push(format!("bundle {}: {e}", descriptor.digest)),
            }
        }
    }
    Ok(out)
}

/// The SAN (URI or email) and Fulcio issuer of a certificate.
fn certificate_identity(cert: &x509_cert::Certificate) -> Result<(String, String), String> {
    let mut subject = None;
    let mut issuer_v2 = None;
    let mut issuer_v1 = None;
    for ext in cert.tbs_certificate().extensions().into_iter().flatten() {
        let oid = ext.extn_id.to_string();
        let value = ext.extn_value.as_bytes();
        if oid == OID_SUBJECT_ALT_NAME {
            let san = x509_cert::ext::pkix::SubjectAltName::from_der(value)
                .map_err(|e| format!("the SAN does not parse: {e}"))?;
            for name in san.0 {
                match name {
                    x509_cert::ext::pkix::name::GeneralName::UniformResourceIdentifier(uri) => {
                        subject.get_or_insert(uri.to_string());
                    }
                    x509_cert::ext::pkix::name::GeneralName::Rfc822Name(email) => {
                        subject.get_or_insert(email.to_string());
                    }
                    _ => {}
                }
            }
        } else if oid == OID_FULCIO_ISSUER_V2 {
            let s = x509_cert::der::asn1::Utf8StringRef::from_der(value)
                .map_err(|e| format!("the issuer extension does not parse: {e}"))?;
            issuer_v2 = Some(s.as_str().to_string());
        } else if oid == OID_FULCIO_ISSUER_V1 {
            issuer_v1 = Some(String::from_utf8_lossy(value).into_owned());
        }
    }
    let subject = subject.ok_or("the certificate has no URI or email SAN")?;
    let issuer = issuer_v2
        .or(issuer_v1)
        .ok_or("the certificate has no Fulcio OIDC issuer extension")?;
    Ok((subject, issuer))
}

/// The certificate chains, for code signing and at the present time, to a
/// certificate authority of `root`.
fn check_chain(
    root: &TrustRoot,
    leaf: &[u8],
    chain: &[Vec<u8>],
    signed_at: Option<i64>,
) -> Result<(), String> {
    use rustls_pki_types::{CertificateDer, UnixTime};
    let anchors = root
        .fulcio_certs
        .iter()
        .filter_map(|der| {
            webpki::anchor_from_trusted_cert(&CertificateDer::from(der.as_slice()))
                .ok()
                .map(|a| a.to_owned())
        })
        .collect::<Vec<_>>();
    let intermediates: Vec<CertificateDer<'_>> = chain
        .iter()
        .chain(root.fulcio_certs.iter())
        .map(|der| CertificateDer::from(der.as_slice()))
        .collect();
    let time = match signed_at {
        Some(seconds) => UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(seconds).map_err(|_| "a negative integrated time".to_string())?,
        )),
        None => UnixTime::now(),
    };
    let leaf = CertificateDer::from(leaf);
    let end_entity =
        webpki::EndEntityCert::try_from(&leaf).map_err(|e| format!("the certificate: {e}"))?;
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            time,
            webpki::KeyUsage::required(EKU_CODE_SIGNING),
            None,
            None,
        )
        .map(|_| ())
        .map_err(|e| format!("the certificate does not chain to the trusted root: {e}"))
}

async fn satisfy(
    source: &OciSource,
    digest: &str,
    authority: &CompiledAuthority,
    candidates: &[Candidate],
) -> Result<SignerEvidence, String> {
    if candidates.is_empty() {
        return Err("the artifact has no signature".into());
    }
    let mut reasons = vec![];
    // The log entries sigstore-rs verified, read once per authority.
    let mut logged: Option<Result<Vec<(String, i64)>, String>> = None;
    for candidate in candidates {
        // With a required log, the log's integrated time is the signing
        // time a certificate is checked at; otherwise the present.
        let mut signed_at = None;
        if authority.tlog_required {
            if !candidate.has_tlog {
                reasons.push(
                    "transparencyLog is required and the signature has no transparency-log entry"
                        .to_string(),
                );
                continue;
            }
            if let Some(rekor_bundle) = &candidate.rekor_bundle
                && let Err(e) = check_legacy_entry_binding(rekor_bundle, candidate)
            {
                reasons.push(format!("transparency log: {e}"));
                continue;
            }
            if logged.is_none() {
                logged = Some(logged_signatures(source, digest, authority).await);
            }
            let wanted = base64::engine::general_purpose::STANDARD.encode(&candidate.signature);
            match logged.as_ref() {
                Some(Ok(entries)) => match entries.iter().find(|(sig, _)| *sig == wanted) {
                    Some((_, time)) => signed_at = Some(*time),
                    None => {
                        reasons.push(
                            "transparency log: no verified transparency-log entry for this signature"
                                .into(),
                        );
                        continue;
                    }
                },
                Some(Err(e)) => {
                    reasons.push(format!("transparency log: {e}"));
                    continue;
                }
                None => continue,
            }
        }
        match check_candidate(authority, candidate, signed_at) {
            Ok(signer) => {
                return Ok(SignerEvidence {
                    authority: authority.name.clone(),
                    format: candidate.format,
                    signer,
                    signature_manifest_digest: candidate.manifest_digest.clone(),
                    signature_digest: sha256_hex(&candidate.signature),
                    trust_root_digest: authority.trust_root.as_ref().map(|r| r.digest.clone()),
                    transparency_log: signed_at.is_some(),
                });
            }
            Err(reason) => reasons.push(reason),
        }
    }
    // The reason of the signature that came closest: a tlog or identity
    // failure says more than "another key".
    reasons.sort_by_key(|r| {
        if r.contains("transparency") {
            0
        } else if r.contains("identity") {
            1
        } else {
            2
        }
    });
    Err(reasons
        .into_iter()
        .next()
        .unwrap_or_else(|| "no signature verifies".into()))
}

fn check_candidate(
    authority: &CompiledAuthority,
    candidate: &Candidate,
    signed_at: Option<i64>,
) -> Result<Signer, String> {
    match &authority.kind {
        CompiledAuthorityKind::Key { key, der } => {
            key.verify_signature(Signature::Raw(&candidate.signature), &candidate.message)
                .map_err(|_| "no signature by this key".to_string())?;
            Ok(Signer::Key {
                key_fingerprint: sha256_hex(der),
            })
        }
        CompiledAuthorityKind::Keyless { identities } => {
            let leaf = candidate
                .certificate
                .as_ref()
                .ok_or("the signature has no certificate (a keyed signature)")?;
            let root = authority.trust_root.as_ref().ok_or("no trusted root")?;
            check_chain(root, leaf, &candidate.chain, signed_at)?;
            let cert = x509_cert::Certificate::from_der(leaf)
                .map_err(|e| format!("the certificate does not parse: {e}"))?;
            let spki = cert.tbs_certificate().subject_public_key_info();
            let key = CosignVerificationKey::try_from(spki)
                .map_err(|e| format!("the certificate's key: {e}"))?;
            key.verify_signature(Signature::Raw(&candidate.signature), &candidate.message)
                .map_err(|_| "the signature does not verify with its certificate".to_string())?;
            let (subject, issuer) = certificate_identity(&cert)?;
            if !identities
                .iter()
                .any(|id| id.issuer.matches(&issuer) && id.subject.matches(&subject))
            {
                return Err(format!(
                    "identity {subject} (issuer {issuer}) matches none of the authority's identities"
                ));
            }
            Ok(Signer::Identity {
                issuer,
                subject,
                certificate_fingerprint: sha256_hex(
                    &cert.to_der().unwrap_or_else(|_| leaf.clone()),
                ),
            })
        }
    }
}

/// The signatures of `digest` whose transparency-log entries sigstore-rs's
/// cosign path verified offline against the Rekor keys of the authority's
/// trusted root (SET; for bundles also the Merkle inclusion proof, the
/// checkpoint and the entry's binding to the bundle), with their integrated
/// times: (base64 signature, integrated time).
async fn logged_signatures(
    source: &OciSource,
    digest: &str,
    authority: &CompiledAuthority,
) -> Result<Vec<(String, i64)>, String> {
    use sigstore::cosign::CosignCapabilities;
    let root = authority.trust_root.as_ref().ok_or("no trusted root")?;
    let trust =
        sigstore::trust::sigstore::SigstoreTrustRoot::from_trusted_root_json_unchecked(&root.json)
            .map_err(|e| format!("the trusted root: {e}"))?;
    let reference = source.reference();
    let mut client = sigstore::cosign::ClientBuilder::default()
        .with_trust_repository(&trust)
        .map_err(|e| e.to_string())?
        .with_oci_client_config(sigstore::registry::ClientConfig {
            protocol: if source.plain_http() {
                sigstore::registry::ClientProtocol::Http
            } else {
                sigstore::registry::ClientProtocol::Https
            },
            ..Default::default()
        })
        .build()
        .map_err(|e| e.to_string())?;
    let image: sigstore::registry::OciReference =
        format!("{}/{}@{digest}", reference.registry, reference.repository)
            .parse()
            .map_err(|e| format!("{e}"))?;
    let auth = match source.registry_auth() {
        oci_client::secrets::RegistryAuth::Basic(u, p) => sigstore::registry::Auth::Basic(u, p),
        oci_client::secrets::RegistryAuth::Bearer(t) => sigstore::registry::Auth::Bearer(t),
        _ => sigstore::registry::Auth::Anonymous,
    };
    let layers = client
        .trusted_signature_layers(&auth, &image)
        .await
        .map_err(|e| source.redact(&e.to_string()))?;
    Ok(layers
        .into_iter()
        .filter_map(|l| Some((l.signature?, l.bundle?.integrated_time())))
        .collect())
}

/// A legacy Rekor entry (hashedrekord or rekord) must name this signature
/// and the SHA-256 of the payload it signs.
fn check_legacy_entry_binding(rekor_bundle: &str, candidate: &Candidate) -> Result<(), String> {
    let bundle: serde_json::Value = serde_json::from_str(rekor_bundle)
        .map_err(|e| format!("the Rekor bundle is not JSON: {e}"))?;
    let body = b64(&bundle["Payload"]["body"]).ok_or("the Rekor bundle has no body")?;
    let body: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("the Rekor entry is not JSON: {e}"))?;
    let spec = &body["spec"];
    let logged_signature = b64(&spec["signature"]["content"]);
    let logged_hash = spec["data"]["hash"]["value"].as_str().unwrap_or_default();
    let payload_hash = hex::encode(Sha256::digest(&candidate.message));
    if logged_signature.as_deref() != Some(candidate.signature.as_slice())
        || logged_hash != payload_hash
    {
        return Err("the transparency-log entry is about another signature".into());
    }
    Ok(())
}

/// Keeps map types in one place for callers building evidence documents.
pub type Annotations = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(authorities: &str) -> String {
        format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\nartifactTypes: [application/vnd.stokaro.ptah.schema.v1]\nauthorities:\n{authorities}"
        )
    }

    #[test]
    fn a_bad_policy_names_its_field() {
        let err = CompiledPolicy::parse(b"apiVersion: v0\nkind: VerificationPolicy\n").unwrap_err();
        assert_eq!(err.field, "apiVersion");
        let err = CompiledPolicy::parse(
            doc("  - name: a\n    keyless:\n      identities: [{issuer: x, subject: y}]\n")
                .as_bytes(),
        )
        .unwrap_err();
        assert_eq!(err.field, "authorities[0].trustedRoot", "{err}");
        let err = CompiledPolicy::parse(doc("  - name: a\n    key: {pem: nothing}\n").as_bytes())
            .unwrap_err();
        assert_eq!(err.field, "authorities[0].key.pem", "{err}");
        let err = CompiledPolicy::parse(b"apiVersion: x\nkind: y\nsurprise: 1\n").unwrap_err();
        assert!(err.reason.contains("surprise"), "{err}");
    }

    #[test]
    fn identities_take_exactly_one_of_exact_and_regexp_and_anchor_regexps() {
        assert!(Matcher::new("subject", &None, &None).is_err());
        assert!(Matcher::new("subject", &Some("a".into()), &Some("b".into())).is_err());
        let re = Matcher::new("subject", &None, &Some("https://ci\\.example/.*".into())).unwrap();
        assert!(re.matches("https://ci.example/release"));
        // Anchored: a prefix elsewhere does not match.
        assert!(!re.matches("evil:https://ci.example/release"));
        let err = Matcher::new("subject", &None, &Some("(".into())).unwrap_err();
        assert_eq!(err.field, "subjectRegExp");
    }

    #[test]
    fn the_json_schema_names_the_fields() {
        let schema = json_schema().to_string();
        for field in [
            "apiVersion",
            "artifactTypes",
            "requiredAnnotations",
            "transparencyLog",
            "subjectRegExp",
        ] {
            assert!(schema.contains(field), "{field}");
        }
    }

    #[test]
    fn no_input_makes_the_parsers_panic() {
        let doc = doc(
            "  - name: a\n    keyless:\n      identities: [{issuer: x, subjectRegExp: '(a|b'}]\n    trustedRoot: '{\"certificateAuthorities\": [{\"certChain\": {\"certificates\": [{\"rawBytes\": \"AAAA\"}]}}]}'\n",
        );
        let bytes = doc.as_bytes();
        for end in 0..bytes.len() {
            let _ = CompiledPolicy::parse(&bytes[..end]);
            let mut flipped = bytes.to_vec();
            flipped[end] ^= 0x5a;
            let _ = CompiledPolicy::parse(&flipped);
        }
        for input in [
            "oci://",
            "oci:///",
            "oci://[",
            "oci://a/b@",
            "oci://a/b:",
            "oci://a/:t",
            "oci://\u{e9}/b",
            "oci://a/b@sha256:\u{e9}",
        ] {
            let _ = input.parse::<crate::oci::OciReference>();
        }
        for input in [&b""[..], b"{", b"{\"dsseEnvelope\":1}", b"{\"dsseEnvelope\":{\"payloadType\":\"application/vnd.in-toto+json\",\"payload\":\"e30=\",\"signatures\":[{\"sig\":\"\"}]}}"] {
            let _ = bundle_candidate(input, "sha256:00", "sha256:11");
        }
    }

    #[test]
    fn dsse_pae_is_the_spec_encoding() {
        assert_eq!(pae("t", b"ab"), b"DSSEv1 1 t 2 ab".to_vec());
    }

    #[test]
    fn a_bundle_about_another_digest_is_no_candidate() {
        let statement = serde_json::json!({"_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "x", "digest": {"sha256": "00"}}]});
        let bundle = serde_json::json!({
            "dsseEnvelope": {"payloadType": IN_TOTO_PAYLOAD_TYPE,
                "payload": base64::engine::general_purpose::STANDARD.encode(statement.to_string()),
                "signatures": [{"sig": "AAAA"}]},
            "verificationMaterial": {"publicKey": {"hint": ""}}});
        let err =
            bundle_candidate(bundle.to_string().as_bytes(), "sha256:11", "sha256:22").unwrap_err();
        assert!(err.contains("another digest"), "{err}");
    }

    /// Referrers (issue 26): the sigstore bundle a referrer carries, read
    /// from bytes nobody vouches for. Nothing panics, and a refused bundle
    /// names the member it is about (`dsseEnvelope.payloadType: …`).
    mod bundle_props {
        use base64::Engine;
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use super::super::*;

        const DIGEST: &str =
            "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        const HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        fn b64(bytes: &[u8]) -> String {
            base64::engine::general_purpose::STANDARD.encode(bytes)
        }

        fn bundle() -> Value {
            let statement = json!({"_type": "https://in-toto.io/Statement/v1",
                "subject": [{"name": "x", "digest": {"sha256": HEX}}]});
            json!({
                "dsseEnvelope": {"payloadType": IN_TOTO_PAYLOAD_TYPE,
                    "payload": b64(statement.to_string().as_bytes()),
                    "signatures": [{"sig": "AAAA"}]},
                "verificationMaterial": {"certificate": {"rawBytes": "AAAA"},
                    "tlogEntries": [{"logIndex": "1"}]}})
        }

        fn value() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<i64>().prop_map(Value::from),
                ".{0,12}".prop_map(Value::String),
                "[A-Za-z0-9+/]{0,16}={0,2}".prop_map(Value::String),
                Just(json!([])),
                Just(json!({})),
                Just(json!([{"sig": 1}, {"sig": "AAAA"}])),
            ]
        }

        /// The members of the bundle a refusal can be about.
        const MEMBERS: &[&str] = &[
            "dsseEnvelope",
            "dsseEnvelope.payloadType",
            "dsseEnvelope.payload",
            "dsseEnvelope.signatures",
            "verificationMaterial",
            "verificationMaterial.certificate",
            "verificationMaterial.tlogEntries",
        ];

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn a_bundle_of_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
                let _ = bundle_candidate(&bytes, DIGEST, DIGEST);
            }

            #[test]
            fn a_bundle_with_a_broken_member_is_refused_naming_it(
                member in prop::sample::select(MEMBERS),
                broken in value(),
            ) {
                let mut doc = bundle();
                prop_assert!(bundle_candidate(doc.to_string().as_bytes(), DIGEST, DIGEST).is_ok());
                let mut at = &mut doc;
                for key in member.split('.') {
                    at = &mut at[key];
                }
                *at = broken;
                if let Err(e) = bundle_candidate(doc.to_string().as_bytes(), DIGEST, DIGEST) {
                    prop_assert!(e.starts_with("dsseEnvelope"), "{e}");
                    prop_assert!(e.starts_with(member) || member.starts_with(e.split(':').next().unwrap_or_default()), "{e} is not about {member}");
                }
            }
        }
    }
}
