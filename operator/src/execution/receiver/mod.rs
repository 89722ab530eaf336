//! The result receiver and harvest: how one result document gets from the
//! runner to the controller (architecture.md, "Results from Jobs"). The
//! paths, headers, digest and answers both ends speak are the protocol's
//! ([`crate::protocol::receiver`]); the checks, the token key and the
//! storage are here.
//!
//! * **Credential.** Each operation's runner presents its Pod's own
//!   ServiceAccount token, which the Job builder has the kubelet project into
//!   the operation container only, with the audience [`RESULT_AUDIENCE`]
//!   and bound to the Pod ([`PodTokens`] checks it against the API server's
//!   service-account keys). The manager neither writes nor reads a Secret
//!   for it, and the API server refuses the token: it is the receiver's.
//! * **Receipt.** `POST` [`RESULTS_PATH`] with `Authorization: Bearer`,
//!   `Content-Type: application/json`, `X-Ptah-Content-SHA256:
//!   sha256:<hex>` and `Content-Length`. The body's length and digest, the
//!   token (the Pod it is bound to must be `operation.podName` and
//!   `operation.podUid`), the claim on the resource
//!   (`status.activeOperation`: operation id, attempt, input fingerprint, Job
//!   UID) and the Pod (name, UID, owning Job) must all match, or the result
//!   is refused and nothing is stored.
//! * **Hand-over.** A read's result (any operation but Apply) checked by the
//!   manager that reconciles is handed to the resource's pass in memory
//!   ([`Inbox`]), and `200` ([`REASON_RECORDED`]) answers once the status
//!   write that records it is made; one not recorded within
//!   [`HAND_OVER_WAIT`] is stored instead.
//! * **Storage.** Otherwise, before `200`, the document is stored in immutable
//!   ConfigMaps owned by the resource (a read's by its Job, so that the
//!   Job's TTL collects them), named from (operation id, attempt):
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
//!   [`POD_UID_HEADER`]. Refused unless the token is that Pod's (`401`),
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
//!
//! The files: `token.rs` (the credential), `checks.rs` (every refusal),
//! `inbox.rs` (the hand-over),
//! `storage.rs` (the stored result and its harvest), `routes.rs` (HTTP).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::{Method, Request, Response, StatusCode, header};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{AlgorithmFamily, DecodingKey, Validation};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
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
    LABEL_OPERATION_ID, MANAGED_BY,
};
use crate::execution::plan::{self, PlanError};
use crate::execution::preview;
use crate::protocol::args::ResourceRef;
use crate::protocol::naming::sha256_hex;
use crate::protocol::receiver::{
    Answer, CONTENT_SHA256_HEADER, MAX_RESULT_BYTES, PLAN_FINGERPRINT_HEADER, PLAN_NAME_HEADER,
    PLANS_PATH, POD_NAME_HEADER, POD_UID_HEADER, REASON_ALREADY_STORED, REASON_PLAN_REFUSED,
    REASON_RECORDED, REASON_STORED, RESULT_AUDIENCE, RESULTS_PATH, content_sha256,
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
pub(super) const KEY_BYTES: usize = 32;

mod checks;
mod inbox;
mod routes;
mod storage;
mod token;

pub use checks::*;
pub use inbox::*;
pub use routes::*;
pub use storage::*;
pub use token::*;

#[cfg(test)]
mod tests;
