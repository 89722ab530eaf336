//! Delivery of the one result document to the manager's receiver
//! ([`crate::execution::receiver`]): `POST --result-url` with the token from
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

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::ResultDocument;
use super::cli::CommonArgs;
use crate::execution::receiver::{
    Answer, CONTENT_SHA256_HEADER, REASON_ALREADY_STORED, content_sha256,
};

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
        ResultDocument::new(
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
}
