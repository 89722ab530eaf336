//! Delivery of the one result document to the manager's receiver (the
//! protocol of [`crate::protocol::receiver`]): `POST --result-url` with the token from
//! `--result-token-file`, trusting only `--result-ca-file` when given.
//!
//! Transient failures (no connection, a timeout, 408, 429, 5xx) are retried
//! with backoff until the delivery's deadline; any other refusal is final. A
//! `409` answering [`REASON_ALREADY_STORED`] means these exact bytes were
//! stored before (a retry after a lost answer): delivered. A name that does
//! not resolve is retried only briefly: it is a wrong `--result-url`, not a
//! receiver restarting.
//!
//! A failed delivery changes neither the step's exit code nor its summary
//! (the termination message is the fallback); it is reported on stderr,
//! which never shows the token or the body.
//!
//! A schema Apply also fetches its plan's bytes from the same receiver
//! ([`fetch_plan`]): `GET` [`plan_url`] (the plans path beside
//! `--result-url`) with the same token, naming its Pod. Transient failures
//! are retried the same way; a refusal is final. The bytes are bounded by
//! the plan limit while they are read and handed over unchecked: the step
//! checks them against its own flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::cli::CommonArgs;
use crate::api::plan::PLAN_MAX_BYTES;
use crate::protocol::receiver::{
    Answer, CONTENT_SHA256_HEADER, PLAN_FINGERPRINT_HEADER, PLAN_NAME_HEADER, POD_NAME_HEADER,
    POD_UID_HEADER, REASON_ALREADY_STORED, RESULTS_PATH, content_sha256, plan_path,
};
use crate::protocol::result::{OperationRef, ResultDocument};

/// The longest a delivery keeps retrying.
pub const MAX_DELIVERY: Duration = Duration::from_secs(120);
/// The longest one attempt may take (an 8 MiB plan on a slow link).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// Attempts when the receiver's name does not resolve.
const MAX_UNRESOLVED_ATTEMPTS: u32 = 3;
/// The largest token file read.
const MAX_TOKEN_BYTES: u64 = 4096;
/// The largest CA file read.
const MAX_CA_BYTES: u64 = 1024 * 1024;

/// Where the result goes, from the operation container's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `--result-url`.
    pub url: String,
    /// `--result-token-file`.
    pub token_file: PathBuf,
    /// `--result-ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--execution-not-after`: no delivery attempt starts after it.
    pub not_after: Option<Timestamp>,
}

impl Target {
    /// The target the common flags name.
    pub fn of(common: &CommonArgs) -> Self {
        Target {
            url: common.result_url.clone(),
            token_file: common.result_token_file.clone(),
            ca_file: common.result_ca_file.clone(),
            not_after: common.execution_not_after,
        }
    }
}

/// How a delivery succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// The receiver stored it now.
    Stored,
    /// The receiver had stored these exact bytes before.
    AlreadyStored,
}

/// Why a result was not delivered. Never holds the token or the body.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The token file could not be read.
    #[error("--result-token-file={path}: {reason}")]
    TokenFile {
        /// The file.
        path: String,
        /// Why (never its content).
        reason: String,
    },
    /// The CA file could not be read or parsed.
    #[error("--result-ca-file={path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The HTTP client could not be made.
    #[error("the HTTP client: {0}")]
    Client(String),
    /// The receiver refused the result for good.
    #[error("the receiver refused the result ({status} {reason}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The receiver's reason.
        reason: String,
        /// The receiver's message.
        message: String,
    },
    /// SIGTERM came, and the grace left for delivery ran out.
    #[error("stopped by SIGTERM before the result was delivered")]
    Terminated,
    /// Every attempt failed transiently until the deadline.
    #[error("not delivered after {attempts} attempt(s): {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
}

/// What one `POST` got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// A response: its status and, when it was one, the receiver's answer.
    Answered {
        /// The HTTP status.
        status: u16,
        /// The JSON answer.
        answer: Option<Answer>,
    },
    /// No response.
    Failed {
        /// Why (without the URL's path or any secret).
        reason: String,
        /// The receiver's name did not resolve.
        unresolved: bool,
    },
}

/// An HTTPS client for the receiver.
#[derive(Clone, Debug)]
pub struct Sender {
    client: reqwest::Client,
}

impl Sender {
    /// A client trusting only `ca_pem` when given (else the system's roots).
    pub fn new(ca_pem: Option<&[u8]>) -> Result<Self, DeliveryError> {
        let mut builder = reqwest::Client::builder()
            .https_only(true)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(ATTEMPT_TIMEOUT);
        if let Some(pem) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| DeliveryError::Client(format!("the CA: {e}")))?;
            if certs.is_empty() {
                return Err(DeliveryError::Client("the CA holds no certificate".into()));
            }
            builder = builder.tls_certs_only(certs);
        }
        let client = builder
            .build()
            .map_err(|e| DeliveryError::Client(e.without_url().to_string()))?;
        Ok(Sender { client })
    }

    /// One `POST` of `body` declaring `content_sha256`.
    pub async fn post(
        &self,
        url: &str,
        token: &str,
        body: Vec<u8>,
        content_sha256: &str,
    ) -> Attempt {
        let sent = self
            .client
            .post(url)
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(CONTENT_SHA256_HEADER, content_sha256)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let answer = response
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Answer>(&b).ok());
                Attempt::Answered { status, answer }
            }
            Err(e) => Attempt::Failed {
                unresolved: is_unresolved(&e),
                reason: chain(&e.without_url()),
            },
        }
    }
}

/// What one plan `GET` got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanAttempt {
    /// The bytes, with what the answer declared about them.
    Fetched(FetchedPlan),
    /// A status other than 200, and the receiver's answer when it was one.
    Answered {
        /// The HTTP status.
        status: u16,
        /// The JSON answer.
        answer: Option<Answer>,
    },
    /// The answer declared or sent more than a plan may hold.
    TooLarge {
        /// The bytes declared or read so far.
        size: u64,
    },
    /// No response, or the body broke off.
    Failed {
        /// Why (without the URL's path or any secret).
        reason: String,
        /// The receiver's name did not resolve.
        unresolved: bool,
    },
}

/// A plan's bytes as the receiver answered them: nothing here is checked
/// against the step's flags yet.
#[derive(Clone, PartialEq, Eq)]
pub struct FetchedPlan {
    /// The body.
    pub bytes: Vec<u8>,
    /// `Content-Length`, when declared.
    pub content_length: Option<u64>,
    /// [`CONTENT_SHA256_HEADER`].
    pub sha256: Option<String>,
    /// [`PLAN_NAME_HEADER`].
    pub plan_name: Option<String>,
    /// [`PLAN_FINGERPRINT_HEADER`].
    pub plan_fingerprint: Option<String>,
}

// Plan bytes are never printed, not even in a debug dump.
impl std::fmt::Debug for FetchedPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchedPlan")
            .field("bytes", &format_args!("{} bytes", self.bytes.len()))
            .field("content_length", &self.content_length)
            .field("sha256", &self.sha256)
            .field("plan_name", &self.plan_name)
            .field("plan_fingerprint", &self.plan_fingerprint)
            .finish()
    }
}

impl Sender {
    /// One `GET` of a plan's bytes at `url`, as the Pod `pod_name`/`pod_uid`.
    pub async fn get_plan(
        &self,
        url: &str,
        token: &str,
        pod_name: &str,
        pod_uid: &str,
    ) -> PlanAttempt {
        let limit = u64::try_from(PLAN_MAX_BYTES).unwrap_or(u64::MAX);
        let sent = self
            .client
            .get(url)
            .bearer_auth(token)
            .header(POD_NAME_HEADER, pod_name)
            .header(POD_UID_HEADER, pod_uid)
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => {
                return PlanAttempt::Failed {
                    unresolved: is_unresolved(&e),
                    reason: chain(&e.without_url()),
                };
            }
        };
        let status = response.status().as_u16();
        if status != 200 {
            let answer = response
                .bytes()
                .await
                .ok()
                .and_then(|b| serde_json::from_slice::<Answer>(&b).ok());
            return PlanAttempt::Answered { status, answer };
        }
        let content_length = response.content_length();
        if let Some(size) = content_length.filter(|n| *n > limit) {
            return PlanAttempt::TooLarge { size };
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (sha256, plan_name, plan_fingerprint) = (
            header(CONTENT_SHA256_HEADER),
            header(PLAN_NAME_HEADER),
            header(PLAN_FINGERPRINT_HEADER),
        );
        let mut bytes = Vec::with_capacity(
            usize::try_from(content_length.unwrap_or_default().min(limit)).unwrap_or_default(),
        );
        loop {
            match response.chunk().await {
                Ok(Some(piece)) => {
                    if (bytes.len() + piece.len()) as u64 > limit {
                        return PlanAttempt::TooLarge {
                            size: (bytes.len() + piece.len()) as u64,
                        };
                    }
                    bytes.extend_from_slice(&piece);
                }
                Ok(None) => break,
                Err(e) => {
                    return PlanAttempt::Failed {
                        unresolved: false,
                        reason: chain(&e.without_url()),
                    };
                }
            }
        }
        PlanAttempt::Fetched(FetchedPlan {
            bytes,
            content_length,
            sha256,
            plan_name,
            plan_fingerprint,
        })
    }
}

/// Why a plan's bytes were not fetched. Never holds the token or the bytes.
#[derive(Debug, thiserror::Error)]
pub enum PlanFetchError {
    /// The token, the CA or the client (as for a delivery).
    #[error(transparent)]
    Setup(#[from] DeliveryError),
    /// `--result-url` does not end in the results path, so the plans path
    /// beside it is unknown.
    #[error("--result-url: its path must end in {RESULTS_PATH} (the plans path is beside it)")]
    Url,
    /// The Pod's identity (downward API) is missing.
    #[error("{0} is not set: the receiver hands a plan only to the claim's Pod")]
    Pod(&'static str),
    /// The receiver refused for good.
    #[error("the receiver refused the plan ({status} {reason}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The receiver's reason.
        reason: String,
        /// The receiver's message (names the plan or chunk, never bytes).
        message: String,
    },
    /// The answer was larger than a plan may be.
    #[error(
        "the receiver's answer has {size} bytes or more; a plan holds at most {PLAN_MAX_BYTES}"
    )]
    TooLarge {
        /// The bytes declared or read.
        size: u64,
    },
    /// SIGTERM, or the step's deadline, came first.
    #[error("every attempt failed transiently: not fetched after {attempts} attempt(s): {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
}

/// The plans URL of an operation: `--result-url` with its trailing
/// [`RESULTS_PATH`] replaced by [`plan_path`].
pub fn plan_url(result_url: &str, op: &OperationRef) -> Result<String, PlanFetchError> {
    let mut url = reqwest::Url::parse(result_url).map_err(|_| PlanFetchError::Url)?;
    let prefix = url
        .path()
        .strip_suffix(RESULTS_PATH)
        .ok_or(PlanFetchError::Url)?
        .to_string();
    url.set_path(&format!(
        "{prefix}{}",
        plan_path(&op.resource, &op.operation_id, op.attempt)
    ));
    url.set_query(None);
    url.set_fragment(None);
    Ok(url.into())
}

/// The token and a client trusting the target's CA.
fn sender_for(target: &Target) -> Result<(Sender, String), DeliveryError> {
    let token = read_token(&target.token_file)?;
    let ca = match &target.ca_file {
        None => None,
        Some(path) => {
            Some(
                read_small(path, MAX_CA_BYTES).map_err(|reason| DeliveryError::CaFile {
                    path: path.display().to_string(),
                    reason,
                })?,
            )
        }
    };
    let sender = Sender::new(ca.as_deref()).map_err(|e| match (&target.ca_file, e) {
        (Some(path), DeliveryError::Client(reason)) => DeliveryError::CaFile {
            path: path.display().to_string(),
            reason,
        },
        (_, e) => e,
    })?;
    Ok((sender, token))
}

/// Fetches the plan bytes of `op` from the receiver `target` names within
/// `bound` (and before `target.not_after`), retrying transient failures;
/// progress goes to stderr.
pub async fn fetch_plan(
    target: &Target,
    op: &OperationRef,
    bound: Duration,
) -> Result<FetchedPlan, PlanFetchError> {
    let pod_name = op
        .pod_name
        .as_deref()
        .ok_or(PlanFetchError::Pod("PTAH_POD_NAME"))?;
    let pod_uid = op
        .pod_uid
        .as_deref()
        .ok_or(PlanFetchError::Pod("PTAH_POD_UID"))?;
    let url = plan_url(&target.url, op)?;
    let (sender, token) = sender_for(target)?;
    let deadline = Instant::now() + super::budget(bound, target.not_after);
    let shown_url = shown(&url);

    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    let mut unresolved = 0;
    loop {
        attempts += 1;
        eprintln!("ptah-runner: fetching the plan from {shown_url}, attempt {attempts}");
        let last = match sender.get_plan(&url, &token, pod_name, pod_uid).await {
            PlanAttempt::Fetched(plan) => {
                eprintln!("ptah-runner: fetched {} bytes of plan", plan.bytes.len());
                return Ok(plan);
            }
            PlanAttempt::TooLarge { size } => return Err(PlanFetchError::TooLarge { size }),
            PlanAttempt::Answered { status, answer } if matches!(status, 408 | 429 | 500..=599) => {
                format!("{status} {}", answer.map(|a| a.message).unwrap_or_default())
            }
            PlanAttempt::Answered { status, answer } => {
                let answer = answer.unwrap_or(Answer {
                    reason: String::new(),
                    message: String::new(),
                });
                return Err(PlanFetchError::Refused {
                    status,
                    reason: answer.reason,
                    message: answer.message,
                });
            }
            PlanAttempt::Failed {
                reason,
                unresolved: u,
            } => {
                unresolved += u32::from(u);
                if unresolved >= MAX_UNRESOLVED_ATTEMPTS {
                    return Err(PlanFetchError::GaveUp {
                        attempts,
                        last: reason,
                    });
                }
                reason
            }
        };
        if Instant::now() + backoff >= deadline {
            return Err(PlanFetchError::GaveUp { attempts, last });
        }
        eprintln!(
            "ptah-runner: plan fetch attempt {attempts} failed ({last}); retrying in {} ms",
            backoff.as_millis()
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether the failure was resolving the receiver's name (hyper-util's
/// connector says `dns error`).
fn is_unresolved(e: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        if s.to_string().starts_with("dns error") {
            return true;
        }
        source = s.source();
    }
    false
}

/// Reads a small file, refusing a larger one.
fn read_small(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.kind().to_string())?;
    if meta.len() > max {
        return Err(format!("larger than {max} bytes"));
    }
    std::fs::read(path).map_err(|e| e.kind().to_string())
}

/// The token in the file, trimmed.
pub fn read_token(path: &Path) -> Result<String, DeliveryError> {
    let err = |reason: String| DeliveryError::TokenFile {
        path: path.display().to_string(),
        reason,
    };
    let bytes = read_small(path, MAX_TOKEN_BYTES).map_err(err)?;
    let text = String::from_utf8(bytes).map_err(|_| err("not UTF-8".into()))?;
    let token = text.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(err("empty, or not a single printable token".into()));
    }
    Ok(token.to_string())
}

/// The URL without query and userinfo, for messages.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            format!(
                "{}://{}{}",
                u.scheme(),
                u.host_str().unwrap_or_default(),
                u.port().map(|p| format!(":{p}")).unwrap_or_default()
            ) + u.path()
        }
        Err(_) => "--result-url".into(),
    }
}

/// Delivers `document` to `target` within `bound` (and before
/// `target.not_after`), retrying transient failures; progress goes to
/// stderr.
pub async fn deliver(
    target: &Target,
    document: &ResultDocument,
    bound: Duration,
) -> Result<Delivered, DeliveryError> {
    let (sender, token) = sender_for(target)?;
    let body = serde_json::to_vec(document)
        .map_err(|e| DeliveryError::Client(format!("encoding the document: {e}")))?;
    let sha = content_sha256(&body);
    let deadline = Instant::now() + super::budget(bound, target.not_after);
    let url = shown(&target.url);

    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    let mut unresolved = 0;
    loop {
        attempts += 1;
        eprintln!(
            "ptah-runner: delivering the result ({} bytes, {sha}) to {url}, attempt {attempts}",
            body.len()
        );
        let attempt = sender.post(&target.url, &token, body.clone(), &sha).await;
        let last = match attempt {
            Attempt::Answered {
                status: 200..=299, ..
            } => {
                eprintln!("ptah-runner: the result was stored");
                return Ok(Delivered::Stored);
            }
            Attempt::Answered {
                status: 409,
                answer: Some(a),
            } if a.reason == REASON_ALREADY_STORED => {
                eprintln!("ptah-runner: the result was already stored");
                return Ok(Delivered::AlreadyStored);
            }
            Attempt::Answered { status, answer } if matches!(status, 408 | 429 | 500..=599) => {
                format!("{status} {}", answer.map(|a| a.message).unwrap_or_default())
            }
            Attempt::Answered { status, answer } => {
                let answer = answer.unwrap_or(Answer {
                    reason: String::new(),
                    message: String::new(),
                });
                return Err(DeliveryError::Refused {
                    status,
                    reason: answer.reason,
                    message: answer.message,
                });
            }
            Attempt::Failed {
                reason,
                unresolved: u,
            } => {
                unresolved += u32::from(u);
                if unresolved >= MAX_UNRESOLVED_ATTEMPTS {
                    return Err(DeliveryError::GaveUp {
                        attempts,
                        last: reason,
                    });
                }
                reason
            }
        };
        let now = Instant::now();
        if now + backoff >= deadline {
            return Err(DeliveryError::GaveUp { attempts, last });
        }
        eprintln!(
            "ptah-runner: delivery attempt {attempts} failed ({last}); retrying in {} ms",
            backoff.as_millis()
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use bytes::Bytes;
    use http::{Response, StatusCode};

    use super::*;
    use crate::server::{Handler, Routes, Tls, serve};

    fn document() -> ResultDocument {
        super::super::result_document(
            "resolve oci",
            None,
            Timestamp::now(),
            &Err(super::super::StepError::failed("x")),
        )
    }

    fn answer(status: StatusCode, reason: &str) -> Response<Bytes> {
        let body = serde_json::to_vec(&Answer {
            reason: reason.into(),
            message: "m".into(),
        })
        .unwrap();
        let mut r = Response::new(Bytes::from(body));
        *r.status_mut() = status;
        r
    }

    /// A receiver answering `script[n]` to its n-th request (the last one
    /// after that), recording the tokens it saw.
    async fn receiver(script: Vec<(StatusCode, &'static str)>) -> (String, String, Arc<AtomicU32>) {
        let tls = Tls::self_signed(&["127.0.0.1"]).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(AtomicU32::new(0));
        let count = seen.clone();
        let handler: Handler = Arc::new(move |req| {
            let n = count.fetch_add(1, Ordering::SeqCst) as usize;
            let (status, reason) = script[n.min(script.len() - 1)];
            let ok_headers = req.headers().get("authorization").map(|v| v.as_bytes())
                == Some(b"Bearer t0ken".as_slice())
                && req
                    .headers()
                    .get(CONTENT_SHA256_HEADER)
                    .map(|v| v.as_bytes())
                    == Some(content_sha256(req.body()).as_bytes());
            Box::pin(async move {
                if ok_headers {
                    answer(status, reason)
                } else {
                    answer(StatusCode::BAD_REQUEST, "Headers")
                }
            })
        });
        let ca = tls.ca_pem.clone();
        tokio::spawn(async move {
            serve(
                listener,
                &tls,
                Routes::new().route("/v1/results", handler),
                1 << 20,
            )
            .await
        });
        (format!("https://127.0.0.1:{port}/v1/results"), ca, seen)
    }

    fn target(url: &str, ca_pem: &str) -> (Target, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t0ken\n").unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
        (
            Target {
                url: url.into(),
                token_file: dir.path().join("token"),
                ca_file: Some(dir.path().join("ca.pem")),
                not_after: None,
            },
            dir,
        )
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_stored() {
        let (url, ca, seen) = receiver(vec![
            (StatusCode::SERVICE_UNAVAILABLE, "Unavailable"),
            (StatusCode::OK, "Stored"),
        ])
        .await;
        let (t, _dir) = target(&url, &ca);
        let got = deliver(&t, &document(), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(got, Delivered::Stored);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn already_stored_counts_as_delivered_and_other_refusals_are_final() {
        let (url, ca, _) = receiver(vec![(StatusCode::CONFLICT, REASON_ALREADY_STORED)]).await;
        let (t, _dir) = target(&url, &ca);
        let got = deliver(&t, &document(), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(got, Delivered::AlreadyStored);

        let (url, ca, seen) = receiver(vec![(StatusCode::CONFLICT, "NotClaimed")]).await;
        let (t, _dir) = target(&url, &ca);
        let e = deliver(&t, &document(), Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            matches!(e, DeliveryError::Refused { status: 409, ref reason, .. } if reason == "NotClaimed"),
            "{e}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_receiver_the_ca_does_not_sign_is_never_sent_the_result() {
        let (url, _ca, seen) = receiver(vec![(StatusCode::OK, "Stored")]).await;
        let other = Tls::self_signed(&["127.0.0.1"]).unwrap();
        let (t, _dir) = target(&url, &other.ca_pem);
        let e = deliver(&t, &document(), Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(matches!(e, DeliveryError::GaveUp { .. }), "{e}");
        assert_eq!(seen.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_missing_token_or_an_unresolvable_receiver_fails_fast_without_secrets() {
        let (mut t, dir) = target("https://ptah-receiver.invalid:9443/v1/results", "");
        t.ca_file = None;
        let e = deliver(&t, &document(), MAX_DELIVERY).await.unwrap_err();
        match e {
            DeliveryError::GaveUp { attempts, .. } => assert!(attempts <= MAX_UNRESOLVED_ATTEMPTS),
            other => panic!("{other}"),
        }
        t.token_file = dir.path().join("absent");
        let e = deliver(&t, &document(), MAX_DELIVERY)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("--result-token-file="), "{e}");
        assert!(!e.contains("t0ken"), "{e}");
    }

    #[test]
    fn the_plans_url_is_beside_the_results_url() {
        let op = OperationRef {
            operation_id: format!("sha256:{}", "ab".repeat(32)),
            attempt: 2,
            resource: crate::protocol::args::ResourceRef {
                kind: "PtahSchema".into(),
                namespace: "shop".into(),
                name: "orders".into(),
            },
            resource_uid: "u".into(),
            generation: 1,
            input_fingerprint: format!("sha256:{}", "cd".repeat(32)),
            pod_name: None,
            pod_uid: None,
            job_uid: None,
        };
        assert_eq!(
            plan_url("https://10.0.0.1:9443/v1/results", &op).unwrap(),
            format!(
                "https://10.0.0.1:9443/v1/plans/shop/PtahSchema/orders/sha256:{}/2",
                "ab".repeat(32)
            )
        );
        assert!(
            plan_url("https://m.example/ptah/v1/results?x=1", &op)
                .unwrap()
                .starts_with("https://m.example/ptah/v1/plans/shop/")
        );
        assert!(matches!(
            plan_url("https://m.example/other", &op),
            Err(PlanFetchError::Url)
        ));
    }

    /// A plans route answering 503 to its first request, then `status`
    /// (200: the bytes `b"ALTER"`); counts the requests.
    async fn plans(status: StatusCode) -> (String, String, Arc<AtomicU32>) {
        let tls = Tls::self_signed(&["127.0.0.1"]).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(AtomicU32::new(0));
        let count = seen.clone();
        let handler: Handler = Arc::new(move |req| {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let named = req.headers().get(POD_UID_HEADER).map(|v| v.as_bytes())
                == Some(b"pod-uid".as_slice());
            Box::pin(async move {
                match (n, status) {
                    _ if !named => answer(StatusCode::BAD_REQUEST, "Pod"),
                    (0, _) => answer(StatusCode::SERVICE_UNAVAILABLE, "Unavailable"),
                    (_, StatusCode::OK) => {
                        let mut r = Response::new(Bytes::from_static(b"ALTER"));
                        r.headers_mut().insert(
                            CONTENT_SHA256_HEADER,
                            content_sha256(b"ALTER").parse().unwrap(),
                        );
                        r
                    }
                    (_, s) => answer(s, "Token"),
                }
            })
        });
        let ca = tls.ca_pem.clone();
        tokio::spawn(async move {
            serve(
                listener,
                &tls,
                Routes::new().route("/v1/plans/", handler),
                1 << 20,
            )
            .await
        });
        (format!("https://127.0.0.1:{port}/v1/results"), ca, seen)
    }

    fn fetching_op() -> OperationRef {
        OperationRef {
            operation_id: format!("sha256:{}", "ab".repeat(32)),
            attempt: 1,
            resource: crate::protocol::args::ResourceRef {
                kind: "PtahSchema".into(),
                namespace: "shop".into(),
                name: "orders".into(),
            },
            resource_uid: "u".into(),
            generation: 1,
            input_fingerprint: format!("sha256:{}", "cd".repeat(32)),
            pod_name: Some("p".into()),
            pod_uid: Some("pod-uid".into()),
            job_uid: None,
        }
    }

    #[tokio::test]
    async fn a_plan_fetch_retries_transient_failures_and_a_refusal_is_final() {
        let (url, ca, seen) = plans(StatusCode::OK).await;
        let (t, _dir) = target(&url, &ca);
        let got = fetch_plan(&t, &fetching_op(), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(got.bytes, b"ALTER");
        assert_eq!(got.content_length, Some(5));
        assert_eq!(got.sha256, Some(content_sha256(b"ALTER")));
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert!(!format!("{got:?}").contains("ALTER"), "{got:?}");

        let (url, ca, seen) = plans(StatusCode::UNAUTHORIZED).await;
        let (t, _dir) = target(&url, &ca);
        let e = fetch_plan(&t, &fetching_op(), Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            matches!(e, PlanFetchError::Refused { status: 401, .. }),
            "{e}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 2);

        let mut anonymous = fetching_op();
        anonymous.pod_uid = None;
        let e = fetch_plan(&t, &anonymous, Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("PTAH_POD_UID"), "{e}");
    }
}
