//! How a runner reaches the manager's result receiver: the paths, the
//! headers, the digest both ends compute of a body, and the JSON answer with
//! its reasons. The receiver's checks, its token key and its storage are the
//! manager's (`execution::receiver`); the runner's delivery is its own
//! (`runner::deliver`).
//!
//! * The token is the Pod's own ServiceAccount token, projected by the
//!   kubelet into the operation container with the audience
//!   [`RESULT_AUDIENCE`] and bound to the Pod: the API server refuses it
//!   (another audience), and the receiver takes it only from that Pod.
//! * `POST` [`RESULTS_PATH`] with `Authorization: Bearer <token>`,
//!   `Content-Type: application/json`, [`CONTENT_SHA256_HEADER`] and
//!   `Content-Length`; at most [`MAX_RESULT_BYTES`].
//! * `GET` [`plan_path`] (below [`PLANS_PATH`]) with the same token and the
//!   calling Pod in [`POD_NAME_HEADER`] / [`POD_UID_HEADER`]; the bytes come
//!   back with [`CONTENT_SHA256_HEADER`], [`PLAN_NAME_HEADER`] and
//!   [`PLAN_FINGERPRINT_HEADER`].
//! * Anything else is answered as an [`Answer`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::args::ResourceRef;

/// The audience of the token a runner presents: the receiver's and nobody
/// else's, so the token calls no Kubernetes API.
pub const RESULT_AUDIENCE: &str = "ptah.run/result-receiver";
/// Where the runner posts its result.
pub const RESULTS_PATH: &str = "/v1/results";
/// Where an Apply runner fetches its plan's bytes: [`plan_path`] below it.
pub const PLANS_PATH: &str = "/v1/plans/";
/// The header carrying `sha256:<hex>` of the body.
pub const CONTENT_SHA256_HEADER: &str = "x-ptah-content-sha256";
/// The header naming the Pod that fetches a plan.
pub const POD_NAME_HEADER: &str = "x-ptah-pod-name";
/// The header giving that Pod's UID.
pub const POD_UID_HEADER: &str = "x-ptah-pod-uid";
/// The header of a plan answer: the plan's name.
pub const PLAN_NAME_HEADER: &str = "x-ptah-plan-name";
/// The header of a plan answer: the plan's fingerprint.
pub const PLAN_FINGERPRINT_HEADER: &str = "x-ptah-plan-fingerprint";
/// The largest result body: an 8 MiB plan and its envelope.
pub const MAX_RESULT_BYTES: usize = 9 * 1024 * 1024;
/// Answer reason: the result was stored now.
pub const REASON_STORED: &str = "Stored";
/// Answer reason: the manager recorded the result's outcome in status (a
/// read's result, handed over without being stored).
pub const REASON_RECORDED: &str = "Recorded";
/// Answer reason (409): these exact bytes were stored before.
pub const REASON_ALREADY_STORED: &str = "AlreadyStored";
/// Answer reason (409): the plan did not read back (a chunk missing,
/// altered, foreign or extra, or other bytes than the claim's digest).
pub const REASON_PLAN_REFUSED: &str = "PlanRefused";

/// What the receiver answers, as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// [`REASON_STORED`], [`REASON_RECORDED`], [`REASON_ALREADY_STORED`], or
    /// the refusal's reason.
    pub reason: String,
    /// What was wrong (names the header, field or rule), or what was stored.
    pub message: String,
}

/// `sha256:<hex>` of `bytes`.
pub fn content_sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The path an Apply runner fetches its plan from:
/// `/v1/plans/<namespace>/<kind>/<name>/<operation id>/<attempt>`.
pub fn plan_path(resource: &ResourceRef, operation_id: &str, attempt: i32) -> String {
    format!(
        "{PLANS_PATH}{}/{}/{}/{operation_id}/{attempt}",
        resource.namespace, resource.kind, resource.name
    )
}
