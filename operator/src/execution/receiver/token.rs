//! The credential: the Pod's own ServiceAccount token, which the kubelet
//! projects into the operation container with [`RESULT_AUDIENCE`] and binds
//! to the Pod, checked here against the API server's service-account keys;
//! the manager's key (stamps are signed under one derived from it); and the
//! CA ConfigMap Pods trust the receiver by.
//!
//! The manager writes no Secret for a Job: the kubelet mints the token
//! through the TokenRequest API, the API server refuses it (its audience is
//! not the API server's), and it names exactly one Pod, which the receiver
//! then finds owned by the claim's Job.

use super::*;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// The manager's key: the stamp key is derived from it (one Secret, which
/// every replica mounts, holds every key only the manager has).
pub struct TokenKey(pub(super) [u8; KEY_BYTES]);

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
                    "{}: the token key must be {} hex digits",
                    path.display(),
                    KEY_BYTES * 2
                ),
            )
        };
        let bytes = hex::decode(text.trim()).map_err(|_| invalid())?;
        let key: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| invalid())?;
        Ok(TokenKey(key))
    }

    /// A key for another purpose, derived from this one under `domain`
    /// (HMAC-SHA256), so one Secret holds every key only the manager has
    /// and a value made under one domain is worth nothing under another.
    pub fn derive(&self, domain: &[u8]) -> [u8; KEY_BYTES] {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        mac.update(domain);
        mac.finalize().into_bytes().into()
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

/// The Pod a verified token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodIdentity {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

impl PodIdentity {
    /// Whether this is the Pod `name` (of `uid`) in `namespace`: the caller
    /// may speak only for itself.
    pub fn check(&self, namespace: &str, name: &str, uid: &str) -> Result<(), Refusal> {
        if self.namespace == namespace && self.name == name && self.uid == uid {
            Ok(())
        } else {
            Err(unauthorized(
                "the token is another Pod's than the one named",
            ))
        }
    }
}

/// The claims of a bound ServiceAccount token that name its Pod.
#[derive(Debug, serde::Deserialize)]
struct Claims {
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubernetesClaims,
}

#[derive(Debug, serde::Deserialize)]
struct KubernetesClaims {
    namespace: String,
    pod: Option<BoundObject>,
}

#[derive(Debug, serde::Deserialize)]
struct BoundObject {
    name: String,
    uid: String,
}

fn unauthorized(message: &str) -> Refusal {
    refuse(StatusCode::UNAUTHORIZED, "Token", message)
}

/// What a token's signature, audience and times say against `keys` (the
/// API server's JWKS): the Pod it is bound to. Only asymmetric keys count,
/// so a token cannot pick a shared secret for itself.
pub fn verify_pod_token(keys: &JwkSet, token: &str) -> Result<PodIdentity, TokenCheck> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|_| TokenCheck::Refused(unauthorized("the token is not a JWT")))?;
    let candidates: Vec<&Jwk> = match &header.kid {
        Some(kid) => keys.find(kid).into_iter().collect(),
        None => keys.keys.iter().collect(),
    };
    if candidates.is_empty() {
        return Err(TokenCheck::UnknownKey);
    }
    let mut validation = Validation::new(header.alg);
    validation.set_audience(&[RESULT_AUDIENCE]);
    validation.set_required_spec_claims(&["exp", "aud", "sub"]);
    validation.validate_nbf = true;
    let mut last = unauthorized("the token is not signed by the cluster's service-account keys");
    for jwk in candidates {
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        if !matches!(key.family(), AlgorithmFamily::Rsa | AlgorithmFamily::Ec) {
            continue;
        }
        match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
            Ok(data) => {
                let k = data.claims.kubernetes;
                let pod = k.pod.ok_or_else(|| {
                    TokenCheck::Refused(unauthorized("the token is bound to no Pod"))
                })?;
                return Ok(PodIdentity {
                    namespace: k.namespace,
                    name: pod.name,
                    uid: pod.uid,
                });
            }
            Err(e) => {
                use jsonwebtoken::errors::ErrorKind as E;
                last = unauthorized(match e.kind() {
                    E::ExpiredSignature => "the token has expired",
                    E::ImmatureSignature => "the token is not valid yet",
                    E::InvalidAudience => "the token is for another audience than the receiver",
                    E::MissingRequiredClaim(_) | E::Json(_) => {
                        "the token is not a Pod's ServiceAccount token"
                    }
                    _ => "the token is not signed by the cluster's service-account keys",
                });
            }
        }
    }
    Err(TokenCheck::Refused(last))
}

/// Why [`verify_pod_token`] took no token.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenCheck {
    /// No key of the set has the token's key id: the keys may have rotated.
    UnknownKey,
    /// Refused, and why.
    Refused(Refusal),
}

impl From<TokenCheck> for Refusal {
    fn from(c: TokenCheck) -> Refusal {
        match c {
            TokenCheck::Refused(r) => r,
            TokenCheck::UnknownKey => unauthorized("the token names no key of the cluster's"),
        }
    }
}

/// The API server's service-account keys, read from its JWKS when first
/// needed and again when a token names a key they lack (at most every
/// [`KEYS_REREAD`]), and the check of a token against them.
pub struct PodTokens {
    client: Client,
    keys: tokio::sync::RwLock<Option<(JwkSet, std::time::Instant)>>,
}

/// Where the API server serves its service-account keys.
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// How often an unknown key id may make the keys be read again.
pub const KEYS_REREAD: std::time::Duration = std::time::Duration::from_secs(10);

impl PodTokens {
    /// Tokens checked against the keys of the API server `client` reaches.
    pub fn new(client: Client) -> Self {
        PodTokens {
            client,
            keys: tokio::sync::RwLock::new(None),
        }
    }

    async fn read_keys(&self) -> Result<JwkSet, Refusal> {
        let request = http::Request::get(JWKS_PATH)
            .body(Vec::new())
            .map_err(|e| {
                refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Unavailable",
                    e.to_string(),
                )
            })?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(|e| unavailable("reading the service-account keys", &e))?;
        serde_json::from_str(&text).map_err(|e| {
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                format!("the API server's {JWKS_PATH} is not a key set: {e}"),
            )
        })
    }

    /// The Pod `token` is bound to, when the cluster's keys sign it for the
    /// receiver; a token naming a key not yet known reads the keys again.
    pub async fn verify(&self, token: &str) -> Result<PodIdentity, Refusal> {
        let stale = match self.keys.read().await.as_ref() {
            Some((keys, at)) => match verify_pod_token(keys, token) {
                Err(TokenCheck::UnknownKey) => at.elapsed() >= KEYS_REREAD,
                checked => return checked.map_err(Refusal::from),
            },
            None => true,
        };
        if !stale {
            return Err(TokenCheck::UnknownKey.into());
        }
        let keys = self.read_keys().await?;
        let checked = verify_pod_token(&keys, token).map_err(Refusal::from);
        *self.keys.write().await = Some((keys, std::time::Instant::now()));
        checked
    }
}
