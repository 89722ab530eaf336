//! The result receiver and harvest: how one result document gets from the
//! runner to the controller (architecture.md, "Results from Jobs"). The
//! paths, headers, digest and answers both ends speak are the protocol's
//! ([`crate::protocol::receiver`]); the checks, the token key and the
//! storage are here.
//!
//! * **Credential.** Each operation's runner holds one token, `hex
//!   HMAC-SHA256(key, operation id ‖ attempt)`, in a Secret the manager
//!   creates ([`token_secret`]) and the Job builder mounts into the operation
//!   container only. The token is derived, never stored: a restarted manager
//!   re-creates the same Secret and checks the same token, and the manager
//!   never needs to read a Secret.
//! * **Receipt.** `POST` [`RESULTS_PATH`] with `Authorization: Bearer`,
//!   `Content-Type: application/json`, `X-Ptah-Content-SHA256:
//!   sha256:<hex>` and `Content-Length`. The body's length and digest, the
//!   token (compared in constant time), the claim on the resource
//!   (`status.activeOperation`: operation id, attempt, input fingerprint, Job
//!   UID) and the Pod (name, UID, owning Job) must all match, or the result
//!   is refused and nothing is stored.
//! * **Storage.** Before `200`, the document is stored in immutable
//!   ConfigMaps owned by the resource, named from (operation id, attempt):
//!   an index holding the first chunk, and further chunks of at most
//!   [`CHUNK_BYTES`] each, created before the index so that the index is the
//!   commit. A second `POST` for the same operation and attempt is a replay:
//!   `409`, nothing stored ([`REASON_ALREADY_STORED`] when the bytes are the
//!   ones stored, which the runner counts as delivered).
//! * **Harvest.** [`harvest`] reads the index and its chunks back, checks
//!   length and SHA-256 and answers the typed document; [`discard`] deletes
//!   them once the controller recorded the outcome.
//!
//! * **Plan bytes for Apply.** `GET` [`plan_path`](crate::protocol::receiver::plan_path) (`/v1/plans/<namespace>/
//!   <kind>/<name>/<operation id>/<attempt>`) with `Authorization: Bearer`
//!   (the same token) and the calling Pod in [`POD_NAME_HEADER`] /
//!   [`POD_UID_HEADER`]. Refused unless the token is the operation's (`401`),
//!   the resource's claim is that operation and attempt, an Apply naming
//!   `planName` and `planFingerprint`, and `status.plan` is that plan
//!   (`409`), and the Pod is the claim's Job's (`409`); a PtahMigration's
//!   Apply runs a sequence, not bytes (`404`). The answer is exactly what
//!   [`crate::execution::plan::read_back`] reassembles and verifies against
//!   `status.plan.contentDigest`, with [`CONTENT_SHA256_HEADER`] and
//!   [`PLAN_FINGERPRINT_HEADER`]; a plan that does not read back is refused
//!   (`409` [`REASON_PLAN_REFUSED`], naming the plan or chunk). The seed:
//!   "Apply reconstructs and hashes the published bytes immediately before
//!   executing them".
//!
//! Neither the token nor the body is ever logged or echoed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::{Method, Request, Response, StatusCode, header};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource};
use sha2::Sha256;

use crate::api::migration::PtahMigration;
use crate::api::schema::{PtahSchema, SchemaPlanSummary};
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{
    ANNOTATION_ATTEMPT, ANNOTATION_OPERATION_ID, LABEL_COMPONENT, LABEL_MANAGED_BY,
    LABEL_OPERATION_ID, MANAGED_BY, RESULT_TOKEN_KEY,
};
use crate::execution::plan::{self, PlanError};
use crate::protocol::args::ResourceRef;
use crate::protocol::receiver::{
    Answer, CONTENT_SHA256_HEADER, MAX_RESULT_BYTES, PLAN_FINGERPRINT_HEADER, PLAN_NAME_HEADER,
    PLANS_PATH, POD_NAME_HEADER, POD_UID_HEADER, REASON_ALREADY_STORED, REASON_PLAN_REFUSED,
    REASON_STORED, RESULTS_PATH, content_sha256,
};
use crate::protocol::result::{OperationRef, RESULT_API_VERSION, RESULT_KIND, ResultDocument};

/// The ConfigMap holding the CA of the receiver's certificate.
pub const RECEIVER_CA_CONFIGMAP: &str = "ptah-receiver-ca";
/// Its key.
pub const RECEIVER_CA_KEY: &str = "ca.crt";
/// The largest piece of a result in one ConfigMap (base64 in `binaryData`
/// keeps it under the API server's object limit).
pub const CHUNK_BYTES: usize = 512 * 1024;
/// `app.kubernetes.io/component` of stored results.
pub const RESULT_COMPONENT: &str = "operation-result";
/// `app.kubernetes.io/component` of token Secrets.
pub const TOKEN_COMPONENT: &str = "result-token";

/// Domain separation of the token MAC from any other use of the key.
const TOKEN_DOMAIN: &[u8] = b"ptah.run/result-token/v1\0";
const KEY_BYTES: usize = 32;
const TOKEN_HEX: usize = 64;

type HmacSha256 = Hmac<Sha256>;

/// The manager's key from which every operation's token is derived.
pub struct TokenKey([u8; KEY_BYTES]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// A fresh key from the operating system's CSPRNG (via aws-lc-rs).
    pub fn generate() -> Self {
        let mut key = [0u8; KEY_BYTES];
        // Without randomness there is no safe key: nothing to fall back to.
        rustls::crypto::aws_lc_rs::default_provider()
            .secure_random
            .fill(&mut key)
            .expect("the system random number generator failed");
        TokenKey(key)
    }

    /// Reads the key file (64 hex digits), or creates it (0600) with a fresh
    /// key when absent.
    pub fn load_or_create(path: &Path) -> std::io::Result<Self> {
        use std::io::{ErrorKind, Write};
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::parse(path, &text),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let key = Self::generate();
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Ok(mut f) => {
                f.write_all(format!("{}\n", hex::encode(key.0)).as_bytes())?;
                f.sync_all()?;
                Ok(key)
            }
            // Another process made it first: use theirs.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                Self::parse(path, &std::fs::read_to_string(path)?)
            }
            Err(e) => Err(e),
        }
    }

    fn parse(path: &Path, text: &str) -> std::io::Result<Self> {
        let invalid = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: the result token key must be {} hex digits",
                    path.display(),
                    KEY_BYTES * 2
                ),
            )
        };
        let bytes = hex::decode(text.trim()).map_err(|_| invalid())?;
        let key: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| invalid())?;
        Ok(TokenKey(key))
    }

    fn mac(&self, operation_id: &str, attempt: i32) -> HmacSha256 {
        // Any key length is valid for HMAC.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        mac.update(TOKEN_DOMAIN);
        mac.update(operation_id.as_bytes());
        mac.update(b"\0");
        mac.update(&attempt.to_be_bytes());
        mac
    }

    /// The per-operation token: hex HMAC-SHA256(key, operation_id ‖
    /// attempt). Deterministic, so a restarted manager re-creates the same
    /// Secret and checks the same token; no token is stored anywhere but in
    /// the Secret.
    pub fn token(&self, operation_id: &str, attempt: i32) -> String {
        hex::encode(self.mac(operation_id, attempt).finalize().into_bytes())
    }

    /// Whether `presented` is the token of the operation, compared in
    /// constant time.
    pub fn verify(&self, operation_id: &str, attempt: i32, presented: &str) -> bool {
        if presented.len() != TOKEN_HEX {
            return false;
        }
        let Ok(bytes) = hex::decode(presented) else {
            return false;
        };
        self.mac(operation_id, attempt).verify_slice(&bytes).is_ok()
    }
}

/// The token Secret of the Job `job_name`.
pub fn token_secret_name(job_name: &str) -> String {
    format!("{job_name}-result")
}

/// The per-operation token Secret: the token under [`RESULT_TOKEN_KEY`],
/// immutable, owned by the resource.
pub fn token_secret(namespace: &str, job_name: &str, owner: OwnerReference, token: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(token_secret_name(job_name)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
                (LABEL_COMPONENT.to_string(), TOKEN_COMPONENT.to_string()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            RESULT_TOKEN_KEY.to_string(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// The ConfigMap with the receiver's CA, in a namespace where Jobs run.
pub fn receiver_ca_config_map(namespace: &str, ca_pem: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(RECEIVER_CA_CONFIGMAP.into()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                LABEL_MANAGED_BY.to_string(),
                MANAGED_BY.to_string(),
            )])),
            // Tells the manager's metadata watch which CA it holds.
            annotations: Some(BTreeMap::from([(
                crate::api::annotations::RECEIVER_CA_DIGEST.to_string(),
                content_sha256(ca_pem.as_bytes()),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            RECEIVER_CA_KEY.to_string(),
            ca_pem.to_string(),
        )])),
        ..ConfigMap::default()
    }
}

/// Why a result was not stored: the status and a reason the runner can
/// act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Refusal {
    /// The HTTP status.
    pub status: StatusCode,
    /// A machine-readable reason.
    pub reason: &'static str,
    /// What was wrong.
    pub message: String,
}

fn refuse(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        reason,
        message: message.into(),
    }
}

fn bad(reason: &'static str, message: impl Into<String>) -> Refusal {
    refuse(StatusCode::BAD_REQUEST, reason, message)
}

fn conflict(reason: &'static str, message: impl Into<String>) -> Refusal {
    refuse(StatusCode::CONFLICT, reason, message)
}

fn unavailable(what: &str, e: &kube::Error) -> Refusal {
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        format!("{what}: {e}"),
    )
}

/// A request checked for form: method, path, headers, body length and
/// digest, a typed document with its operation. The token is checked after.
#[derive(Debug)]
pub struct Received {
    /// The document.
    pub document: ResultDocument,
    /// Its operation.
    pub operation: OperationRef,
    /// The bearer token presented.
    pub token: String,
    /// The body's `sha256:<hex>`.
    pub sha256: String,
}

/// Checks everything about a request that needs no key and no API: each
/// refusal names what is wrong.
pub fn check_request(req: &Request<Bytes>) -> Result<Received, Refusal> {
    if req.method() != Method::POST {
        return Err(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method",
            format!("{RESULTS_PATH} takes POST only"),
        ));
    }
    if req.uri().path() != RESULTS_PATH {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            "Path",
            format!("results go to {RESULTS_PATH}"),
        ));
    }
    let headers = req.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let token = text(header::AUTHORIZATION.as_str())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            refuse(
                StatusCode::UNAUTHORIZED,
                "Token",
                "Authorization: Bearer <token> is required",
            )
        })?;
    let content_type = text(header::CONTENT_TYPE.as_str()).unwrap_or_default();
    if content_type.split(';').next().map(str::trim) != Some("application/json") {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "ContentType",
            "Content-Type must be application/json",
        ));
    }
    let body = req.body();
    if body.len() > MAX_RESULT_BYTES {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ContentLength",
            format!("the body is larger than {MAX_RESULT_BYTES} bytes"),
        ));
    }
    let length = text(header::CONTENT_LENGTH.as_str())
        .and_then(|v| v.parse::<usize>().ok())
        .ok_or_else(|| {
            refuse(
                StatusCode::LENGTH_REQUIRED,
                "ContentLength",
                "Content-Length is required",
            )
        })?;
    if length != body.len() {
        return Err(bad(
            "ContentLength",
            format!(
                "Content-Length is {length} but the body has {} bytes",
                body.len()
            ),
        ));
    }
    let declared = text(CONTENT_SHA256_HEADER)
        .ok_or_else(|| bad("ContentSHA256", "X-Ptah-Content-SHA256 is required"))?;
    let sha256 = content_sha256(body);
    if declared != sha256 {
        return Err(bad(
            "ContentSHA256",
            "X-Ptah-Content-SHA256 does not match the SHA-256 of the body",
        ));
    }
    let document: ResultDocument = serde_json::from_slice(body).map_err(|e| {
        bad(
            "Document",
            format!("the body is not a result document: {e}"),
        )
    })?;
    if document.api_version != RESULT_API_VERSION || document.kind != RESULT_KIND {
        return Err(bad(
            "Document",
            format!("apiVersion/kind must be {RESULT_API_VERSION}/{RESULT_KIND}"),
        ));
    }
    let operation = document
        .operation
        .clone()
        .ok_or_else(|| bad("Document", "operation is required"))?;
    if operation_hex(&operation.operation_id).is_none() {
        return Err(bad(
            "Document",
            "operation.operationId must be sha256:<64 hex>",
        ));
    }
    Ok(Received {
        document,
        operation,
        token: token.to_string(),
        sha256,
    })
}

fn operation_hex(operation_id: &str) -> Option<&str> {
    let hex = operation_id.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// The claim must be this operation: id, attempt, input fingerprint, and the
/// Job UID once recorded.
pub fn check_claim(claim: Option<&ActiveOperation>, op: &OperationRef) -> Result<(), Refusal> {
    let Some(claim) = claim else {
        return Err(conflict(
            "NotClaimed",
            "the resource claims no operation (status.activeOperation)",
        ));
    };
    if claim.operation_id != op.operation_id {
        return Err(conflict(
            "NotClaimed",
            "operation.operationId is not the claimed operation (status.activeOperation.operationID)",
        ));
    }
    if claim.attempt != op.attempt {
        return Err(conflict(
            "ClaimMismatch",
            format!(
                "operation.attempt {} is not the claimed attempt {}",
                op.attempt, claim.attempt
            ),
        ));
    }
    if claim.input_fingerprint != op.input_fingerprint {
        return Err(conflict(
            "ClaimMismatch",
            "operation.inputFingerprint is not the claim's inputFingerprint",
        ));
    }
    if let Some(job_uid) = &claim.job_uid
        && op.job_uid.as_deref() != Some(job_uid.as_str())
    {
        return Err(conflict(
            "ClaimMismatch",
            "operation.jobUid is not the claim's jobUID",
        ));
    }
    if claim.job_name.is_none() {
        return Err(conflict(
            "ClaimMismatch",
            "the claim names no Job (jobName)",
        ));
    }
    Ok(())
}

/// The Pod must be the one named, with the UID given, owned by the claim's
/// Job (and by the Job UID the document gives).
pub fn check_pod(pod: &Pod, op: &OperationRef, job_name: &str) -> Result<(), Refusal> {
    if pod.metadata.uid.as_deref() != op.pod_uid.as_deref() {
        return Err(conflict(
            "PodMismatch",
            "operation.podUid is not the UID of the Pod operation.podName names",
        ));
    }
    check_owner_job(pod, op.job_uid.as_deref(), job_name)
}

/// The Pod is owned by the Job `job_name` (of UID `job_uid`, when known).
fn check_owner_job(pod: &Pod, job_uid: Option<&str>, job_name: &str) -> Result<(), Refusal> {
    let owned =
        pod.metadata.owner_references.iter().flatten().any(|o| {
            o.kind == "Job" && o.name == job_name && job_uid.is_none_or(|uid| o.uid == uid)
        });
    if !owned {
        return Err(conflict(
            "PodMismatch",
            format!("the Pod is not owned by the claim's Job {job_name}"),
        ));
    }
    Ok(())
}

/// A plan request checked for form; the token is checked after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// The resource whose claim names the plan.
    pub resource: ResourceRef,
    /// The claim's operation id.
    pub operation_id: String,
    /// The claim's attempt.
    pub attempt: i32,
    /// The bearer token presented.
    pub token: String,
    /// The Pod that asks ([`POD_NAME_HEADER`]).
    pub pod_name: String,
    /// Its UID ([`POD_UID_HEADER`]).
    pub pod_uid: String,
}

/// A Kubernetes name in a path segment: a DNS subdomain's characters.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.'))
}

/// Checks everything about a plan request that needs no key and no API:
/// each refusal names what is wrong.
pub fn check_plan_request(req: &Request<Bytes>) -> Result<PlanRequest, Refusal> {
    if req.method() != Method::GET {
        return Err(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method",
            format!("{PLANS_PATH} takes GET only"),
        ));
    }
    let not_found = || {
        refuse(
            StatusCode::NOT_FOUND,
            "Path",
            format!("plans are at {PLANS_PATH}<namespace>/<kind>/<name>/<operation id>/<attempt>"),
        )
    };
    let rest = req
        .uri()
        .path()
        .strip_prefix(PLANS_PATH)
        .ok_or_else(not_found)?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [namespace, kind, name, operation_id, attempt] = parts.as_slice() else {
        return Err(not_found());
    };
    if !is_name(namespace) || !is_name(name) {
        return Err(bad(
            "Path",
            "the namespace and name must be Kubernetes names",
        ));
    }
    if operation_hex(operation_id).is_none() {
        return Err(bad("Path", "the operation id must be sha256:<64 hex>"));
    }
    let attempt: i32 = attempt
        .parse()
        .ok()
        .filter(|a| *a >= 1)
        .ok_or_else(|| bad("Path", "the attempt must be a number from 1"))?;
    let headers = req.headers();
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let token = text(header::AUTHORIZATION.as_str())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            refuse(
                StatusCode::UNAUTHORIZED,
                "Token",
                "Authorization: Bearer <token> is required",
            )
        })?;
    let pod_name = text(POD_NAME_HEADER)
        .filter(|n| is_name(n))
        .ok_or_else(|| bad("Pod", "X-Ptah-Pod-Name must name the calling Pod"))?;
    let pod_uid = text(POD_UID_HEADER)
        .ok_or_else(|| bad("Pod", "X-Ptah-Pod-UID must give the calling Pod's UID"))?;
    Ok(PlanRequest {
        resource: ResourceRef {
            kind: (*kind).to_string(),
            namespace: (*namespace).to_string(),
            name: (*name).to_string(),
        },
        operation_id: (*operation_id).to_string(),
        attempt,
        token: token.to_string(),
        pod_name: pod_name.to_string(),
        pod_uid: pod_uid.to_string(),
    })
}

/// The plan an Apply claim names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedPlan {
    /// `planName`.
    pub name: String,
    /// `planFingerprint`.
    pub fingerprint: String,
    /// `planUID`, when the claim records it.
    pub uid: Option<String>,
    /// The claim's Job.
    pub job_name: String,
    /// Its UID, once recorded.
    pub job_uid: Option<String>,
}

/// The claim must be this operation and attempt, an Apply naming its plan
/// and its Job.
pub fn check_apply_claim(
    claim: Option<&ActiveOperation>,
    req: &PlanRequest,
) -> Result<ClaimedPlan, Refusal> {
    let Some(claim) = claim else {
        return Err(conflict(
            "NotClaimed",
            "the resource claims no operation (status.activeOperation)",
        ));
    };
    if claim.operation_id != req.operation_id {
        return Err(conflict(
            "NotClaimed",
            "the operation id is not the claimed operation (status.activeOperation.operationID)",
        ));
    }
    if claim.attempt != req.attempt {
        return Err(conflict(
            "ClaimMismatch",
            format!(
                "attempt {} is not the claimed attempt {}",
                req.attempt, claim.attempt
            ),
        ));
    }
    if claim.type_ != OperationType::Apply {
        return Err(conflict(
            "ClaimMismatch",
            format!(
                "the claim is a {:?}, not an Apply (status.activeOperation.type)",
                claim.type_
            ),
        ));
    }
    let (Some(name), Some(fingerprint)) = (&claim.plan_name, &claim.plan_fingerprint) else {
        return Err(conflict(
            "ClaimMismatch",
            "the Apply claim names no plan (planName, planFingerprint)",
        ));
    };
    let job_name = claim
        .job_name
        .clone()
        .ok_or_else(|| conflict("ClaimMismatch", "the claim names no Job (jobName)"))?;
    Ok(ClaimedPlan {
        name: name.clone(),
        fingerprint: fingerprint.clone(),
        uid: claim.plan_uid.clone(),
        job_name,
        job_uid: claim.job_uid.clone(),
    })
}

/// `status.plan` must be the claim's plan (name, fingerprint, UID when the
/// claim records it) with its content digest: the digest the bytes are
/// read back against.
pub fn check_current_plan(
    current: Option<&SchemaPlanSummary>,
    claimed: &ClaimedPlan,
) -> Result<String, Refusal> {
    let moved = |what: &str| {
        conflict(
            "PlanMoved",
            format!(
                "status.plan is not the plan the Apply claim names ({what} differs from planName {})",
                claimed.name
            ),
        )
    };
    let plan = current.ok_or_else(|| moved("no status.plan"))?;
    if plan.name != claimed.name {
        return Err(moved("status.plan.name"));
    }
    if plan.fingerprint != claimed.fingerprint {
        return Err(moved("status.plan.fingerprint"));
    }
    if claimed.uid.as_ref().is_some_and(|uid| *uid != plan.uid) {
        return Err(moved("status.plan.uid"));
    }
    plan.content_digest.clone().ok_or_else(|| {
        conflict(
            "PlanMoved",
            "status.plan.contentDigest is not recorded: no bytes to read back",
        )
    })
}

/// The Pod must be the one named, with the UID given, owned by the claim's
/// Job.
pub fn check_plan_pod(pod: &Pod, req: &PlanRequest, claimed: &ClaimedPlan) -> Result<(), Refusal> {
    if pod.metadata.uid.as_deref() != Some(req.pod_uid.as_str()) {
        return Err(conflict(
            "PodMismatch",
            "X-Ptah-Pod-UID is not the UID of the Pod X-Ptah-Pod-Name names",
        ));
    }
    check_owner_job(pod, claimed.job_uid.as_deref(), &claimed.job_name)
}

/// The refusal of a plan that did not read back: transient failures are
/// `503` (the runner retries), anything else names the plan or chunk.
fn plan_refusal(e: &PlanError) -> Refusal {
    if e.is_transient() {
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            format!("reading the plan: {e}"),
        )
    } else {
        conflict(REASON_PLAN_REFUSED, e.to_string())
    }
}

/// A plan's bytes as the receiver answers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanBytes {
    /// The PtahSchemaPlan.
    pub name: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// The bytes, read back and verified.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the bytes (`status.plan.contentDigest`).
    pub sha256: String,
}

/// The index ConfigMap's name of (operation id, attempt).
pub fn result_name(operation_id: &str, attempt: i32) -> Option<String> {
    operation_hex(operation_id).map(|hex| format!("ptah-result-{hex}-{attempt}"))
}

fn chunk_name(index: &str, i: usize) -> String {
    format!("{index}-c{i}")
}

/// Keys of stored results.
mod key {
    pub const OPERATION_ID: &str = "operationID";
    pub const ATTEMPT: &str = "attempt";
    pub const LENGTH: &str = "length";
    pub const SHA256: &str = "sha256";
    pub const CHUNKS: &str = "chunks";
    pub const POD_UID: &str = "podUID";
    pub const JOB_UID: &str = "jobUID";
    pub const RECEIVED_AT: &str = "receivedAt";
    pub const CHUNK: &str = "chunk";
}

/// The objects that store one result: the index (holding chunk 0) and the
/// further chunks, in the order they are created (index last).
pub fn result_objects(
    namespace: &str,
    owner: &OwnerReference,
    op: &OperationRef,
    body: &[u8],
    received_at: Timestamp,
) -> Option<(ConfigMap, Vec<ConfigMap>)> {
    let index_name = result_name(&op.operation_id, op.attempt)?;
    let hex = operation_hex(&op.operation_id)?;
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (LABEL_COMPONENT.to_string(), RESULT_COMPONENT.to_string()),
            (LABEL_OPERATION_ID.to_string(), hex[..16].to_string()),
        ])),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_OPERATION_ID.to_string(), op.operation_id.clone()),
            (ANNOTATION_ATTEMPT.to_string(), op.attempt.to_string()),
        ])),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let pieces: Vec<&[u8]> = if body.is_empty() {
        vec![body]
    } else {
        body.chunks(CHUNK_BYTES).collect()
    };
    let chunk_map =
        |bytes: &[u8]| BTreeMap::from([(key::CHUNK.to_string(), ByteString(bytes.to_vec()))]);
    let chunks = pieces
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, bytes)| ConfigMap {
            metadata: meta(chunk_name(&index_name, i)),
            immutable: Some(true),
            data: Some(BTreeMap::from([(
                key::SHA256.to_string(),
                content_sha256(bytes),
            )])),
            binary_data: Some(chunk_map(bytes)),
        })
        .collect();
    let mut data = BTreeMap::from([
        (key::OPERATION_ID.to_string(), op.operation_id.clone()),
        (key::ATTEMPT.to_string(), op.attempt.to_string()),
        (key::LENGTH.to_string(), body.len().to_string()),
        (key::SHA256.to_string(), content_sha256(body)),
        (key::CHUNKS.to_string(), pieces.len().to_string()),
        (key::RECEIVED_AT.to_string(), received_at.to_string()),
    ]);
    if let Some(uid) = &op.pod_uid {
        data.insert(key::POD_UID.to_string(), uid.clone());
    }
    if let Some(uid) = &op.job_uid {
        data.insert(key::JOB_UID.to_string(), uid.clone());
    }
    let index = ConfigMap {
        metadata: meta(index_name),
        immutable: Some(true),
        data: Some(data),
        binary_data: Some(chunk_map(pieces[0])),
    };
    Some((index, chunks))
}

/// Why a stored result could not be harvested or discarded.
#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    /// The API server refused or failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// Why.
        source: kube::Error,
    },
    /// A stored result does not check out.
    #[error("stored result {name}: {what}")]
    Corrupt {
        /// The ConfigMap.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The operation id is not `sha256:<64 hex>`.
    #[error("operation id: must be sha256:<64 hex>")]
    OperationId,
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReceiverError {
    let what = what.into();
    move |source| ReceiverError::Api { what, source }
}

/// A stored result, as the controller harvests it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResult {
    /// The typed document.
    pub document: ResultDocument,
    /// The Pod that delivered it.
    pub pod_uid: Option<String>,
    /// Its Job.
    pub job_uid: Option<String>,
    /// When the receiver stored it.
    pub received_at: Time,
}

/// Reassembles and checks a stored result from its index and chunks.
pub fn assemble(index: &ConfigMap, chunks: &[ConfigMap]) -> Result<StoredResult, ReceiverError> {
    let name = index.metadata.name.clone().unwrap_or_default();
    let corrupt = |what: String| ReceiverError::Corrupt {
        name: name.clone(),
        what,
    };
    let data = index.data.clone().unwrap_or_default();
    let field = |k: &str| {
        data.get(k)
            .cloned()
            .ok_or_else(|| corrupt(format!("data.{k} is missing")))
    };
    let length: usize = field(key::LENGTH)?
        .parse()
        .map_err(|_| corrupt(format!("data.{} is not a number", key::LENGTH)))?;
    let count: usize = field(key::CHUNKS)?
        .parse()
        .map_err(|_| corrupt(format!("data.{} is not a number", key::CHUNKS)))?;
    if count != chunks.len() + 1 {
        return Err(corrupt(format!(
            "{count} chunks recorded, {} found",
            chunks.len() + 1
        )));
    }
    let piece = |cm: &ConfigMap| {
        cm.binary_data
            .as_ref()
            .and_then(|b| b.get(key::CHUNK))
            .map(|b| b.0.clone())
            .ok_or_else(|| {
                corrupt(format!(
                    "{}: binaryData.{} is missing",
                    cm.metadata.name.as_deref().unwrap_or_default(),
                    key::CHUNK
                ))
            })
    };
    let mut body = piece(index)?;
    for c in chunks {
        body.extend(piece(c)?);
    }
    if body.len() != length {
        return Err(corrupt(format!(
            "{} bytes found, {length} recorded",
            body.len()
        )));
    }
    if content_sha256(&body) != field(key::SHA256)? {
        return Err(corrupt(
            "the SHA-256 of the bytes is not the one recorded".into(),
        ));
    }
    let document: ResultDocument = serde_json::from_slice(&body)
        .map_err(|e| corrupt(format!("not a result document: {e}")))?;
    let op = document
        .operation
        .as_ref()
        .ok_or_else(|| corrupt("the document has no operation".into()))?;
    if op.operation_id != field(key::OPERATION_ID)?
        || op.attempt.to_string() != field(key::ATTEMPT)?
    {
        return Err(corrupt(
            "the document's operation is not the one the index records".into(),
        ));
    }
    let received_at = field(key::RECEIVED_AT)?
        .parse::<Timestamp>()
        .map_err(|_| corrupt(format!("data.{} is not a time", key::RECEIVED_AT)))?;
    Ok(StoredResult {
        pod_uid: data.get(key::POD_UID).cloned(),
        job_uid: data.get(key::JOB_UID).cloned(),
        received_at: Time(received_at),
        document,
    })
}

/// The stored result of (operation, attempt), checked; `None` when none was
/// stored.
pub async fn harvest(
    client: &Client,
    namespace: &str,
    operation_id: &str,
    attempt: i32,
) -> Result<Option<StoredResult>, ReceiverError> {
    let name = result_name(operation_id, attempt).ok_or(ReceiverError::OperationId)?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(index) = api
        .get_opt(&name)
        .await
        .map_err(api_error(format!("reading ConfigMap {namespace}/{name}")))?
    else {
        return Ok(None);
    };
    let count: usize = index
        .data
        .as_ref()
        .and_then(|d| d.get(key::CHUNKS))
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    let mut chunks = Vec::new();
    for i in 1..count {
        let chunk = chunk_name(&name, i);
        let cm = api
            .get_opt(&chunk)
            .await
            .map_err(api_error(format!("reading ConfigMap {namespace}/{chunk}")))?
            .ok_or_else(|| ReceiverError::Corrupt {
                name: name.clone(),
                what: format!("chunk {chunk} is missing"),
            })?;
        chunks.push(cm);
    }
    assemble(&index, &chunks).map(Some)
}

/// Deletes every stored result of the operation (after the controller
/// recorded its outcome).
pub async fn discard(
    client: &Client,
    namespace: &str,
    operation_id: &str,
) -> Result<(), ReceiverError> {
    let hex = operation_hex(operation_id).ok_or(ReceiverError::OperationId)?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={RESULT_COMPONENT},{LABEL_OPERATION_ID}={}",
        &hex[..16]
    );
    let list = api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error(format!("listing results in {namespace}")))?;
    for cm in list.items {
        // The label holds a prefix only: the annotation decides.
        let full = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_OPERATION_ID));
        if full.map(String::as_str) != Some(operation_id) {
            continue;
        }
        let Some(name) = cm.metadata.name else {
            continue;
        };
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(api_error(format!("deleting ConfigMap {namespace}/{name}"))(
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// The receiver: checks a posted result against the claim and stores it.
pub struct Receiver {
    client: Client,
    key: Arc<TokenKey>,
}

impl Receiver {
    /// A receiver checking tokens derived from `key`.
    pub fn new(client: Client, key: Arc<TokenKey>) -> Self {
        Receiver { client, key }
    }

    /// The handler for [`RESULTS_PATH`] on [`crate::server::serve`].
    pub fn handler(self: Arc<Self>) -> crate::server::Handler {
        Arc::new(move |req| {
            let me = self.clone();
            Box::pin(async move {
                let (status, answer) = match me.receive(req).await {
                    Ok(name) => (
                        StatusCode::OK,
                        Answer {
                            reason: REASON_STORED.into(),
                            message: format!("stored as ConfigMap {name}"),
                        },
                    ),
                    Err(r) => (
                        r.status,
                        Answer {
                            reason: r.reason.into(),
                            message: r.message,
                        },
                    ),
                };
                let body = serde_json::to_vec(&answer).unwrap_or_default();
                let mut response = Response::new(Bytes::from(body));
                *response.status_mut() = status;
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                response
            })
        })
    }

    /// The handler for [`PLANS_PATH`] on [`crate::server::serve`]: the
    /// plan's bytes, or a JSON [`Answer`] saying why not.
    pub fn plan_handler(self: Arc<Self>) -> crate::server::Handler {
        Arc::new(move |req| {
            let me = self.clone();
            Box::pin(async move {
                match me.plan_bytes(req).await {
                    Ok(plan) => {
                        let mut response = Response::new(Bytes::from(plan.bytes));
                        let headers = response.headers_mut();
                        headers.insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/octet-stream"),
                        );
                        for (name, value) in [
                            (CONTENT_SHA256_HEADER, plan.sha256),
                            (PLAN_NAME_HEADER, plan.name),
                            (PLAN_FINGERPRINT_HEADER, plan.fingerprint),
                        ] {
                            if let Ok(v) = header::HeaderValue::from_str(&value) {
                                headers.insert(name, v);
                            }
                        }
                        response
                    }
                    Err(r) => {
                        let answer = Answer {
                            reason: r.reason.into(),
                            message: r.message,
                        };
                        let body = serde_json::to_vec(&answer).unwrap_or_default();
                        let mut response = Response::new(Bytes::from(body));
                        *response.status_mut() = r.status;
                        response.headers_mut().insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/json"),
                        );
                        response
                    }
                }
            })
        })
    }

    /// Checks one plan request against the token, the claim, `status.plan`
    /// and the Pod, then reads the plan back (every chunk and digest
    /// checked).
    pub async fn plan_bytes(&self, req: Request<Bytes>) -> Result<PlanBytes, Refusal> {
        let request = check_plan_request(&req)?;
        if !self
            .key
            .verify(&request.operation_id, request.attempt, &request.token)
        {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "Token",
                "the token is not the one of this operation and attempt",
            ));
        }
        let r = &request.resource;
        let schema = match r.kind.as_str() {
            "PtahSchema" => {
                let api: Api<PtahSchema> = Api::namespaced(self.client.clone(), &r.namespace);
                api.get_opt(&r.name)
                    .await
                    .map_err(|e| unavailable("reading the PtahSchema", &e))?
                    .ok_or_else(|| {
                        conflict(
                            "NotClaimed",
                            format!("PtahSchema {}/{} does not exist", r.namespace, r.name),
                        )
                    })?
            }
            // A migration's Apply runs its approved sequence from the
            // fetched source: there are no plan bytes to hand out.
            "PtahMigration" => {
                return Err(refuse(
                    StatusCode::NOT_FOUND,
                    "NoPlanBytes",
                    "a PtahMigration's plan is a sequence of versions, not bytes",
                ));
            }
            _ => {
                return Err(bad("Path", "the kind must be PtahSchema or PtahMigration"));
            }
        };
        let status = schema.status.as_ref();
        let claimed =
            check_apply_claim(status.and_then(|s| s.active_operation.as_ref()), &request)?;
        let content_digest = check_current_plan(status.and_then(|s| s.plan.as_ref()), &claimed)?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &r.namespace);
        let pod = pods
            .get_opt(&request.pod_name)
            .await
            .map_err(|e| unavailable("reading the Pod", &e))?
            .ok_or_else(|| {
                conflict(
                    "PodMismatch",
                    "the Pod X-Ptah-Pod-Name names does not exist",
                )
            })?;
        check_plan_pod(&pod, &request, &claimed)?;
        let bytes = plan::read_back(&self.client, &r.namespace, &claimed.name, &content_digest)
            .await
            .map_err(|e| plan_refusal(&e))?;
        Ok(PlanBytes {
            name: claimed.name,
            fingerprint: claimed.fingerprint,
            bytes,
            sha256: content_digest,
        })
    }

    /// Checks and stores one result; answers the index ConfigMap's name.
    pub async fn receive(&self, req: Request<Bytes>) -> Result<String, Refusal> {
        let received = check_request(&req)?;
        let op = &received.operation;
        if !self
            .key
            .verify(&op.operation_id, op.attempt, &received.token)
        {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "Token",
                "the token is not the one of this operation and attempt",
            ));
        }
        let namespace = op.resource.namespace.as_str();
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let index_name = result_name(&op.operation_id, op.attempt)
            .ok_or_else(|| bad("Document", "operation.operationId must be sha256:<64 hex>"))?;
        // A replay is answered before anything else is read.
        if let Some(stored) = configmaps
            .get_opt(&index_name)
            .await
            .map_err(|e| unavailable("reading the stored result", &e))?
        {
            return Err(replay(&stored, &received.sha256));
        }
        let (owner, claim) = self.claim_of(op).await?;
        check_claim(claim.as_ref(), op)?;
        let job_name = claim
            .as_ref()
            .and_then(|c| c.job_name.clone())
            .unwrap_or_default();
        let pod_name = op
            .pod_name
            .as_deref()
            .ok_or_else(|| bad("Document", "operation.podName is required"))?;
        if op.pod_uid.is_none() {
            return Err(bad("Document", "operation.podUid is required"));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = pods
            .get_opt(pod_name)
            .await
            .map_err(|e| unavailable("reading the Pod", &e))?
            .ok_or_else(|| {
                conflict(
                    "PodMismatch",
                    "the Pod operation.podName names does not exist",
                )
            })?;
        check_pod(&pod, op, &job_name)?;

        let (index, chunks) =
            result_objects(namespace, &owner, op, req.body(), Timestamp::now())
                .ok_or_else(|| bad("Document", "operation.operationId must be sha256:<64 hex>"))?;
        let pp = PostParams::default();
        for chunk in &chunks {
            match configmaps.create(&pp, chunk).await {
                Ok(_) => {}
                // Left by an earlier attempt that stopped before its index:
                // the same bytes may go on, others may not.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let name = chunk.metadata.name.as_deref().unwrap_or_default();
                    let existing = configmaps
                        .get(name)
                        .await
                        .map_err(|e| unavailable("reading a stored chunk", &e))?;
                    if existing.binary_data != chunk.binary_data {
                        return Err(conflict(
                            "Replay",
                            "a different result was stored for this operation and attempt",
                        ));
                    }
                }
                Err(e) => return Err(unavailable("storing a result chunk", &e)),
            }
        }
        match configmaps.create(&pp, &index).await {
            Ok(_) => Ok(index_name),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let stored = configmaps
                    .get(&index_name)
                    .await
                    .map_err(|e| unavailable("reading the stored result", &e))?;
                Err(replay(&stored, &received.sha256))
            }
            Err(e) => Err(unavailable("storing the result", &e)),
        }
    }

    /// The owner reference and claim of the resource the document names.
    async fn claim_of(
        &self,
        op: &OperationRef,
    ) -> Result<(OwnerReference, Option<ActiveOperation>), Refusal> {
        let r = &op.resource;
        let gone = || {
            conflict(
                "NotClaimed",
                format!("{} {}/{} does not exist", r.kind, r.namespace, r.name),
            )
        };
        let (meta, claim, kind, api_version) = match r.kind.as_str() {
            "PtahSchema" => {
                let api: Api<PtahSchema> = Api::namespaced(self.client.clone(), &r.namespace);
                let s = api
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| unavailable("reading the PtahSchema", &e))?
                    .ok_or_else(gone)?;
                let claim = s.status.as_ref().and_then(|st| st.active_operation.clone());
                (
                    s.metadata,
                    claim,
                    PtahSchema::kind(&()),
                    PtahSchema::api_version(&()),
                )
            }
            "PtahMigration" => {
                let api: Api<PtahMigration> = Api::namespaced(self.client.clone(), &r.namespace);
                let m = api
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| unavailable("reading the PtahMigration", &e))?
                    .ok_or_else(gone)?;
                let claim = m.status.as_ref().and_then(|st| st.active_operation.clone());
                (
                    m.metadata,
                    claim,
                    PtahMigration::kind(&()),
                    PtahMigration::api_version(&()),
                )
            }
            _ => {
                return Err(bad(
                    "Document",
                    "operation.resource.kind must be PtahSchema or PtahMigration",
                ));
            }
        };
        let uid = meta.uid.clone().unwrap_or_default();
        if uid != op.resource_uid {
            return Err(conflict(
                "NotClaimed",
                "operation.resourceUid is not the resource's UID",
            ));
        }
        let owner = OwnerReference {
            api_version: api_version.into_owned(),
            kind: kind.into_owned(),
            name: r.name.clone(),
            uid,
            controller: None,
            block_owner_deletion: None,
        };
        Ok((owner, claim))
    }
}

/// The refusal of a second result for a stored (operation, attempt).
fn replay(stored: &ConfigMap, sha256: &str) -> Refusal {
    let same = stored
        .data
        .as_ref()
        .and_then(|d| d.get(key::SHA256))
        .is_some_and(|s| s == sha256);
    if same {
        conflict(
            REASON_ALREADY_STORED,
            "this result was already stored for this operation and attempt",
        )
    } else {
        conflict(
            "Replay",
            "a result was already stored for this operation and attempt",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::receiver::plan_path;
    use crate::protocol::result::{ErrorDoc, Outcome};

    const OP: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const FP: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn op() -> OperationRef {
        OperationRef {
            operation_id: OP.into(),
            attempt: 1,
            resource: ResourceRef {
                kind: "PtahSchema".into(),
                namespace: "shop".into(),
                name: "orders".into(),
            },
            resource_uid: "res-uid".into(),
            generation: 3,
            input_fingerprint: FP.into(),
            pod_name: Some("ptah-resolve-orders-1111111111111111-abcde".into()),
            pod_uid: Some("pod-uid".into()),
            job_uid: Some("job-uid".into()),
        }
    }

    fn document(op: Option<OperationRef>) -> ResultDocument {
        let mut d = ResultDocument::new(
            "resolve git",
            op,
            Timestamp::now(),
            Err((
                Outcome::Failed,
                ErrorDoc {
                    rule: None,
                    file: None,
                    message: "failed: network".into(),
                },
            )),
        );
        d.started_at = "2026-01-01T00:00:00Z".into();
        d.finished_at = d.started_at.clone();
        d
    }

    fn request(body: &[u8], edit: impl FnOnce(&mut http::request::Builder)) -> Request<Bytes> {
        let mut b = Request::builder()
            .method(Method::POST)
            .uri(RESULTS_PATH)
            .header(header::AUTHORIZATION, "Bearer abc")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len().to_string())
            .header(CONTENT_SHA256_HEADER, content_sha256(body));
        edit(&mut b);
        b.body(Bytes::copy_from_slice(body)).unwrap()
    }

    fn refusal(req: Request<Bytes>) -> Refusal {
        check_request(&req).unwrap_err()
    }

    #[test]
    fn tokens_are_deterministic_and_bound_to_key_operation_and_attempt() {
        let key = TokenKey([7; 32]);
        let t = key.token(OP, 1);
        assert_eq!(t, TokenKey([7; 32]).token(OP, 1));
        assert_eq!(t.len(), 64);
        assert!(key.verify(OP, 1, &t));
        assert_ne!(t, key.token(OP, 2));
        assert_ne!(t, key.token(FP, 1));
        assert_ne!(t, TokenKey([8; 32]).token(OP, 1));
        assert_ne!(
            TokenKey::generate().token(OP, 1),
            TokenKey::generate().token(OP, 1)
        );
        assert!(!key.verify(OP, 2, &t));
        assert!(!key.verify(OP, 1, &t[..63]));
        assert!(!key.verify(OP, 1, &"z".repeat(64)));
    }

    #[test]
    fn the_key_file_is_created_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let made = TokenKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let read = TokenKey::load_or_create(&path).unwrap();
        assert_eq!(made.token(OP, 1), read.token(OP, 1));
        std::fs::write(&path, "short").unwrap();
        let e = TokenKey::load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("64 hex digits") && !e.contains("short"), "{e}");
        assert_eq!(format!("{read:?}"), "TokenKey(..)");
    }

    #[test]
    fn the_token_secret_holds_the_token_immutably() {
        let owner = OwnerReference {
            api_version: "ptah.run/v1alpha1".into(),
            kind: "PtahSchema".into(),
            name: "orders".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let s = token_secret("shop", "ptah-resolve-orders-1111111111111111", owner, "tok");
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("ptah-resolve-orders-1111111111111111-result")
        );
        assert_eq!(s.immutable, Some(true));
        assert_eq!(s.data.unwrap()[RESULT_TOKEN_KEY].0, b"tok");
        let cm = receiver_ca_config_map("shop", "PEM");
        assert_eq!(cm.data.unwrap()[RECEIVER_CA_KEY], "PEM");
    }

    #[test]
    fn a_well_formed_request_is_parsed_typed() {
        let body = serde_json::to_vec(&document(Some(op()))).unwrap();
        let r = check_request(&request(&body, |_| {})).unwrap();
        assert_eq!(r.operation, op());
        assert_eq!(r.token, "abc");
        assert_eq!(r.document, document(Some(op())));
    }

    #[test]
    fn malformed_requests_are_refused_naming_what_is_wrong() {
        let body = serde_json::to_vec(&document(Some(op()))).unwrap();
        let headers = |name: &'static str, value: &'static str| {
            move |b: &mut http::request::Builder| {
                b.headers_mut()
                    .unwrap()
                    .insert(name, header::HeaderValue::from_static(value));
            }
        };
        let r = refusal(request(
            &body,
            headers("x-ptah-content-sha256", "sha256:00"),
        ));
        assert_eq!(
            (r.status, r.reason),
            (StatusCode::BAD_REQUEST, "ContentSHA256")
        );
        assert!(r.message.contains("X-Ptah-Content-SHA256"), "{r}");

        let r = refusal(request(&body, headers("content-length", "12")));
        assert_eq!(
            (r.status, r.reason),
            (StatusCode::BAD_REQUEST, "ContentLength")
        );
        assert!(r.message.contains("Content-Length is 12"), "{r}");

        let r = refusal(request(&body, |b| {
            b.headers_mut().unwrap().remove(header::AUTHORIZATION);
        }));
        assert_eq!((r.status, r.reason), (StatusCode::UNAUTHORIZED, "Token"));

        let r = refusal(request(&body, headers("content-type", "text/plain")));
        assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

        let r = refusal(request(&body, |b| {
            *b = std::mem::take(b).method(Method::GET);
        }));
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);

        let no_op = serde_json::to_vec(&document(None)).unwrap();
        let r = refusal(request(&no_op, |_| {}));
        assert_eq!((r.status, r.reason), (StatusCode::BAD_REQUEST, "Document"));
        assert!(r.message.contains("operation is required"), "{r}");

        let r = refusal(request(b"{\"kind\": 1}", |_| {}));
        assert!(r.message.contains("not a result document"), "{r}");

        let mut bad_id = op();
        bad_id.operation_id = "sha256:XYZ".into();
        let r = refusal(request(
            &serde_json::to_vec(&document(Some(bad_id))).unwrap(),
            |_| {},
        ));
        assert!(r.message.contains("operation.operationId"), "{r}");
    }

    fn claim() -> ActiveOperation {
        serde_json::from_value(serde_json::json!({
            "type": "Resolve",
            "operationID": OP,
            "inputFingerprint": FP,
            "jobName": "ptah-resolve-orders-1111111111111111",
            "jobUID": "job-uid",
            "attempt": 1,
            "startedAt": "2026-01-01T00:00:00Z",
        }))
        .unwrap()
    }

    #[test]
    fn a_result_must_match_the_claim() {
        assert!(check_claim(Some(&claim()), &op()).is_ok());
        let r = check_claim(None, &op()).unwrap_err();
        assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "NotClaimed"));
        for (edit, field) in [
            (
                Box::new(|o: &mut OperationRef| o.input_fingerprint = OP.into())
                    as Box<dyn Fn(&mut OperationRef)>,
                "inputFingerprint",
            ),
            (Box::new(|o| o.attempt = 2), "attempt"),
            (Box::new(|o| o.job_uid = Some("other".into())), "jobUid"),
            (Box::new(|o| o.job_uid = None), "jobUid"),
            (Box::new(|o| o.operation_id = FP.into()), "operationId"),
        ] {
            let mut o = op();
            edit(&mut o);
            let r = check_claim(Some(&claim()), &o).unwrap_err();
            assert_eq!(r.status, StatusCode::CONFLICT);
            assert!(r.message.contains(field), "{field}: {r}");
        }
        let mut unrecorded = claim();
        unrecorded.job_uid = None;
        let mut o = op();
        o.job_uid = None;
        assert!(check_claim(Some(&unrecorded), &o).is_ok());
    }

    #[test]
    fn the_pod_must_be_the_jobs() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "p", "uid": "pod-uid",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                    "name": "ptah-resolve-orders-1111111111111111", "uid": "job-uid"}]
            }
        }))
        .unwrap();
        let job = "ptah-resolve-orders-1111111111111111";
        assert!(check_pod(&pod, &op(), job).is_ok());
        assert!(check_pod(&pod, &op(), "another-job").is_err());
        let mut o = op();
        o.pod_uid = Some("other".into());
        assert!(
            check_pod(&pod, &o, job)
                .unwrap_err()
                .message
                .contains("podUid")
        );
        let mut o = op();
        o.job_uid = Some("other".into());
        assert!(check_pod(&pod, &o, job).is_err());
    }

    #[test]
    fn a_large_result_is_chunked_and_reassembled_checked() {
        let mut doc = document(Some(op()));
        // Well over two chunks of document.
        doc.error.as_mut().unwrap().message = "é".repeat(CHUNK_BYTES + 10);
        let body = serde_json::to_vec(&doc).unwrap();
        let owner = OwnerReference::default();
        let at = Timestamp::now();
        let (index, chunks) = result_objects("shop", &owner, &op(), &body, at).unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(
            index.metadata.name.as_deref(),
            Some("ptah-result-1111111111111111111111111111111111111111111111111111111111111111-1")
        );
        for cm in chunks.iter().chain([&index]) {
            let size: usize = cm
                .binary_data
                .as_ref()
                .unwrap()
                .values()
                .map(|b| b.0.len())
                .sum();
            assert!(size <= CHUNK_BYTES);
            assert_eq!(cm.immutable, Some(true));
            let labels = cm.metadata.labels.as_ref().unwrap();
            assert!(labels.values().all(|v| v.len() <= 63));
            assert_eq!(
                cm.metadata.annotations.as_ref().unwrap()[ANNOTATION_OPERATION_ID],
                OP
            );
        }
        let stored = assemble(&index, &chunks).unwrap();
        assert_eq!(stored.document, doc);
        assert_eq!(stored.pod_uid.as_deref(), Some("pod-uid"));
        assert_eq!(stored.job_uid.as_deref(), Some("job-uid"));
        assert_eq!(stored.received_at, Time(at));

        // A chunk altered, or lost, is found.
        let mut altered = chunks.clone();
        let bytes = &mut altered[1]
            .binary_data
            .as_mut()
            .unwrap()
            .get_mut("chunk")
            .unwrap()
            .0;
        bytes[0] ^= 1;
        let e = assemble(&index, &altered).unwrap_err().to_string();
        assert!(e.contains("SHA-256"), "{e}");
        let e = assemble(&index, &chunks[..1]).unwrap_err().to_string();
        assert!(e.contains("3 chunks recorded, 2 found"), "{e}");
    }

    #[test]
    fn a_small_result_is_one_object() {
        let body = serde_json::to_vec(&document(Some(op()))).unwrap();
        let (index, chunks) = result_objects(
            "shop",
            &OwnerReference::default(),
            &op(),
            &body,
            Timestamp::now(),
        )
        .unwrap();
        assert!(chunks.is_empty());
        assert_eq!(
            assemble(&index, &[]).unwrap().document,
            document(Some(op()))
        );
    }

    fn plan_request(path: &str, edit: impl FnOnce(&mut http::request::Builder)) -> Request<Bytes> {
        let mut b = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(header::AUTHORIZATION, "Bearer abc")
            .header(POD_NAME_HEADER, "ptah-apply-orders-1111111111111111-abcde")
            .header(POD_UID_HEADER, "pod-uid");
        edit(&mut b);
        b.body(Bytes::new()).unwrap()
    }

    fn plan_op() -> PlanRequest {
        PlanRequest {
            resource: op().resource,
            operation_id: OP.into(),
            attempt: 1,
            token: "abc".into(),
            pod_name: "ptah-apply-orders-1111111111111111-abcde".into(),
            pod_uid: "pod-uid".into(),
        }
    }

    #[test]
    fn a_plan_request_is_parsed_from_its_path_and_headers() {
        let path = plan_path(&op().resource, OP, 1);
        assert_eq!(path, format!("/v1/plans/shop/PtahSchema/orders/{OP}/1"));
        assert_eq!(
            check_plan_request(&plan_request(&path, |_| {})).unwrap(),
            plan_op()
        );
    }

    #[test]
    fn malformed_plan_requests_are_refused_naming_what_is_wrong() {
        let path = plan_path(&op().resource, OP, 1);
        let refusal = |req| check_plan_request(&req).unwrap_err();

        let r = refusal(plan_request(&path, |b| {
            b.headers_mut().unwrap().remove(header::AUTHORIZATION);
        }));
        assert_eq!((r.status, r.reason), (StatusCode::UNAUTHORIZED, "Token"));

        let r = refusal(plan_request(&path, |b| {
            *b = std::mem::take(b).method(Method::POST);
        }));
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);

        let r = refusal(plan_request(&path, |b| {
            b.headers_mut().unwrap().remove(POD_UID_HEADER);
        }));
        assert_eq!((r.status, r.reason), (StatusCode::BAD_REQUEST, "Pod"));
        assert!(r.message.contains("X-Ptah-Pod-UID"), "{r}");

        let r = refusal(plan_request(&path, |b| {
            b.headers_mut().unwrap().remove(POD_NAME_HEADER);
        }));
        assert!(r.message.contains("X-Ptah-Pod-Name"), "{r}");

        let r = refusal(plan_request("/v1/plans/shop/PtahSchema/orders", |_| {}));
        assert_eq!((r.status, r.reason), (StatusCode::NOT_FOUND, "Path"));
        let r = refusal(plan_request(
            "/v1/plans/shop/PtahSchema/orders/sha256:XYZ/1",
            |_| {},
        ));
        assert!(r.message.contains("operation id"), "{r}");
        let r = refusal(plan_request(
            &format!("/v1/plans/shop/PtahSchema/orders/{OP}/0"),
            |_| {},
        ));
        assert!(r.message.contains("attempt"), "{r}");
        let r = refusal(plan_request(
            &format!("/v1/plans/Shop_/PtahSchema/orders/{OP}/1"),
            |_| {},
        ));
        assert!(r.message.contains("namespace and name"), "{r}");
    }

    fn apply_claim() -> ActiveOperation {
        let mut c = claim();
        c.type_ = OperationType::Apply;
        c.plan_name = Some("orders-0123456789ab".into());
        c.plan_uid = Some("plan-uid".into());
        c.plan_fingerprint = Some(FP.into());
        c
    }

    fn summary() -> SchemaPlanSummary {
        serde_json::from_value(serde_json::json!({
            "name": "orders-0123456789ab",
            "uid": "plan-uid",
            "fingerprint": FP,
            "contentDigest": OP,
        }))
        .unwrap()
    }

    #[test]
    fn a_plan_is_handed_out_only_under_its_apply_claim() {
        let claimed = check_apply_claim(Some(&apply_claim()), &plan_op()).unwrap();
        assert_eq!(claimed.name, "orders-0123456789ab");
        assert_eq!(claimed.job_uid.as_deref(), Some("job-uid"));
        assert_eq!(
            check_current_plan(Some(&summary()), &claimed).unwrap(),
            OP.to_string()
        );

        let r = check_apply_claim(None, &plan_op()).unwrap_err();
        assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "NotClaimed"));
        for (edit, field) in [
            (
                Box::new(|c: &mut ActiveOperation| c.type_ = OperationType::Observe)
                    as Box<dyn Fn(&mut ActiveOperation)>,
                "not an Apply",
            ),
            (Box::new(|c| c.attempt = 2), "attempt 1"),
            (Box::new(|c| c.operation_id = FP.into()), "operationID"),
            (Box::new(|c| c.plan_name = None), "planName"),
            (Box::new(|c| c.plan_fingerprint = None), "planFingerprint"),
            (Box::new(|c| c.job_name = None), "jobName"),
        ] {
            let mut c = apply_claim();
            edit(&mut c);
            let r = check_apply_claim(Some(&c), &plan_op()).unwrap_err();
            assert_eq!(r.status, StatusCode::CONFLICT);
            assert!(r.message.contains(field), "{field}: {r}");
        }
    }

    #[test]
    fn status_plan_must_be_the_claims_plan_with_its_digest() {
        let claimed = check_apply_claim(Some(&apply_claim()), &plan_op()).unwrap();
        let r = check_current_plan(None, &claimed).unwrap_err();
        assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "PlanMoved"));
        for (edit, field) in [
            (
                Box::new(|p: &mut SchemaPlanSummary| p.name = "orders-ffffffffffff".into())
                    as Box<dyn Fn(&mut SchemaPlanSummary)>,
                "status.plan.name",
            ),
            (
                Box::new(|p| p.fingerprint = OP.into()),
                "status.plan.fingerprint",
            ),
            (Box::new(|p| p.uid = "other".into()), "status.plan.uid"),
            (Box::new(|p| p.content_digest = None), "contentDigest"),
        ] {
            let mut p = summary();
            edit(&mut p);
            let r = check_current_plan(Some(&p), &claimed).unwrap_err();
            assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "PlanMoved"));
            assert!(r.message.contains(field), "{field}: {r}");
        }
        // A claim that records no plan UID is bound by name and fingerprint.
        let mut c = apply_claim();
        c.plan_uid = None;
        let claimed = check_apply_claim(Some(&c), &plan_op()).unwrap();
        let mut p = summary();
        p.uid = "other".into();
        assert!(check_current_plan(Some(&p), &claimed).is_ok());
    }

    #[test]
    fn the_plan_goes_only_to_the_claims_jobs_pod() {
        let pod = |uid: &str, job: &str, job_uid: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": "p", "uid": uid,
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                        "name": job, "uid": job_uid}]
                }
            }))
            .unwrap()
        };
        let job = "ptah-resolve-orders-1111111111111111";
        let claimed = check_apply_claim(Some(&apply_claim()), &plan_op()).unwrap();
        assert!(check_plan_pod(&pod("pod-uid", job, "job-uid"), &plan_op(), &claimed).is_ok());
        let r = check_plan_pod(&pod("other", job, "job-uid"), &plan_op(), &claimed).unwrap_err();
        assert!(r.message.contains("X-Ptah-Pod-UID"), "{r}");
        let r = check_plan_pod(
            &pod("pod-uid", "another-job", "job-uid"),
            &plan_op(),
            &claimed,
        )
        .unwrap_err();
        assert_eq!(r.reason, "PodMismatch");
        assert!(check_plan_pod(&pod("pod-uid", job, "other"), &plan_op(), &claimed).is_err());
    }

    #[test]
    fn a_plan_that_does_not_read_back_is_refused_naming_the_chunk_and_an_api_failure_retried() {
        let r = plan_refusal(&PlanError::ChunkAltered {
            plan: "orders-0123456789ab".into(),
            chunk: "orders-0123456789ab-001".into(),
            reason: "digest".into(),
        });
        assert_eq!(
            (r.status, r.reason),
            (StatusCode::CONFLICT, REASON_PLAN_REFUSED)
        );
        assert!(r.message.contains("orders-0123456789ab-001"), "{r}");
        let r = plan_refusal(&PlanError::Deleting {
            kind: "PtahSchemaPlan",
            name: "orders-0123456789ab".into(),
        });
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    }
}
