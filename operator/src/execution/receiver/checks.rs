//! The checks a posted result or a plan fetch must pass, each refusal with
//! its status and a reason the runner can act on. Pure.

use super::*;

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

pub(super) fn refuse(
    status: StatusCode,
    reason: &'static str,
    message: impl Into<String>,
) -> Refusal {
    Refusal {
        status,
        reason,
        message: message.into(),
    }
}

pub(super) fn bad(reason: &'static str, message: impl Into<String>) -> Refusal {
    refuse(StatusCode::BAD_REQUEST, reason, message)
}

pub(super) fn conflict(reason: &'static str, message: impl Into<String>) -> Refusal {
    refuse(StatusCode::CONFLICT, reason, message)
}

pub(super) fn unavailable(what: &str, e: &kube::Error) -> Refusal {
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

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(authorization: Option<&str>) -> Result<&str, Refusal> {
    authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            refuse(
                StatusCode::UNAUTHORIZED,
                "Token",
                "Authorization: Bearer <token> is required",
            )
        })
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
    let token = bearer(text(header::AUTHORIZATION.as_str()))?;
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
    let document: ResultDocument = crate::protocol::from_json(body).map_err(|e| {
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
    if sha256_hex(&operation.operation_id).is_none() {
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

/// The claim there is, if it is `operation` (its id and attempt); a refusal
/// naming the request's fields (`named`: how the id and the attempt are
/// called where the request carries them) otherwise.
fn claimed<'a>(
    claim: Option<&'a ActiveOperation>,
    operation: (&str, i32),
    named: (&str, &str),
) -> Result<&'a ActiveOperation, Refusal> {
    let (id, attempt) = operation;
    let Some(claim) = claim else {
        return Err(conflict(
            "NotClaimed",
            "the resource claims no operation (status.activeOperation)",
        ));
    };
    if claim.operation_id != id {
        return Err(conflict(
            "NotClaimed",
            format!(
                "{} is not the claimed operation (status.activeOperation.operationID)",
                named.0
            ),
        ));
    }
    if claim.attempt != attempt {
        return Err(conflict(
            "ClaimMismatch",
            format!(
                "{} {attempt} is not the claimed attempt {}",
                named.1, claim.attempt
            ),
        ));
    }
    Ok(claim)
}

/// The claim must be this operation: id, attempt, input fingerprint, and the
/// Job UID once recorded.
pub fn check_claim(claim: Option<&ActiveOperation>, op: &OperationRef) -> Result<(), Refusal> {
    let named = ("operation.operationId", "operation.attempt");
    let claim = claimed(claim, (&op.operation_id, op.attempt), named)?;
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
/// Job (and by the Job UID the document gives); answers that Job.
pub fn check_pod(pod: &Pod, op: &OperationRef, job_name: &str) -> Result<OwnerReference, Refusal> {
    if pod.metadata.uid.as_deref() != op.pod_uid.as_deref() {
        return Err(conflict(
            "PodMismatch",
            "operation.podUid is not the UID of the Pod operation.podName names",
        ));
    }
    check_owner_job(pod, op.job_uid.as_deref(), job_name)
}

/// The Pod is owned by the Job `job_name` (of UID `job_uid`, when known);
/// answers that Job as an owner of what the receiver stores for it.
pub(super) fn check_owner_job(
    pod: &Pod,
    job_uid: Option<&str>,
    job_name: &str,
) -> Result<OwnerReference, Refusal> {
    let job =
        pod.metadata.owner_references.iter().flatten().find(|o| {
            o.kind == "Job" && o.name == job_name && job_uid.is_none_or(|uid| o.uid == uid)
        });
    match job {
        Some(job) => Ok(OwnerReference {
            controller: None,
            block_owner_deletion: None,
            ..job.clone()
        }),
        None => Err(conflict(
            "PodMismatch",
            format!("the Pod is not owned by the claim's Job {job_name}"),
        )),
    }
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
pub(super) fn is_name(s: &str) -> bool {
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
    if sha256_hex(operation_id).is_none() {
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
    let token = bearer(text(header::AUTHORIZATION.as_str()))?;
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
    let named = ("the operation id", "attempt");
    let claim = claimed(claim, (&req.operation_id, req.attempt), named)?;
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
    check_owner_job(pod, claimed.job_uid.as_deref(), &claimed.job_name).map(|_| ())
}

/// The refusal of a plan that did not read back: transient failures are
/// `503` (the runner retries), anything else names the plan or chunk.
pub(super) fn plan_refusal(e: &PlanError) -> Refusal {
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
