//! OCI sources: the artifacts `ptah schema push` and `ptah migrations push`
//! store in a registry (and the same artifacts pushed by `oras` or
//! `flux push artifact`).
//!
//! Resolve reads a tag once and answers the manifest digest; every later step
//! works on that digest only ([`OciSource::resolve`]). Fetch reads the
//! manifest and the layers by digest, checks every digest and every size
//! bound, and checks the artifact type, so a schema artifact can never stand
//! in for a migration directory ([`OciSource::fetch`]).
//!
//! oci-client reads manifests and referrer indexes whole and has no size
//! limits of its own (oras-project/rust-oci-client#206): the bounds here are
//! checked on what it returns (manifests) or while streaming (layers, where
//! the declared size is checked before a byte is read).
//!
//! Credentials never appear in errors: every message that leaves this module
//! has the registry password or token of its source replaced by `[redacted]`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use base64::Engine;
use futures::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `artifactType` of `ptah schema push`.
pub const SCHEMA_ARTIFACT_TYPE: &str = "application/vnd.stokaro.ptah.schema.v1";
/// `artifactType` of `ptah migrations push`.
pub const MIGRATIONS_ARTIFACT_TYPE: &str = "application/vnd.stokaro.ptah.migrations.v1";
/// Layer media type of the one `schema.hcl` of a schema artifact.
pub const SCHEMA_LAYER_TYPE: &str = "application/vnd.stokaro.ptah.schema.hcl.v1";
/// Layer media type of each file of a migration directory.
pub const MIGRATION_FILE_LAYER_TYPE: &str = "application/vnd.stokaro.ptah.migration.file.v1";
/// Config media type of an artifact `flux push artifact` packs.
pub const FLUX_CONFIG_TYPE: &str = "application/vnd.cncf.flux.config.v1+json";
/// Its one layer: a gzip tarball of the pushed directory.
pub const FLUX_CONTENT_LAYER_TYPE: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
/// The OCI image manifest, the only manifest an artifact may be.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI empty config of artifacts packed by oras-go.
pub const OCI_EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";
/// The annotation the Ptah CLI stamps with the artifact type.
pub const KIND_ANNOTATION: &str = "io.stokaro.ptah.kind";
/// The annotation that names a layer's file.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// Which artifact a source must be: one of the two Ptah artifacts, or the
/// Flux artifact a Flux `OCIRepository` serves (a tarball the operator
/// snapshots from source-controller, and Verify checks in the registry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ArtifactKind {
    Schema,
    Migrations,
    Flux,
}

impl ArtifactKind {
    pub fn artifact_type(self) -> &'static str {
        match self {
            ArtifactKind::Schema => SCHEMA_ARTIFACT_TYPE,
            ArtifactKind::Migrations => MIGRATIONS_ARTIFACT_TYPE,
            ArtifactKind::Flux => FLUX_CONFIG_TYPE,
        }
    }

    pub fn layer_media_type(self) -> &'static str {
        match self {
            ArtifactKind::Schema => SCHEMA_LAYER_TYPE,
            ArtifactKind::Migrations => MIGRATION_FILE_LAYER_TYPE,
            ArtifactKind::Flux => FLUX_CONTENT_LAYER_TYPE,
        }
    }
}

/// Everything that can go wrong with an OCI source. Messages never hold a
/// credential.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("OCI reference {reference:?}: {reason}")]
    Reference { reference: String, reason: String },
    #[error("registry credentials: {0}")]
    Credentials(String),
    #[error("custom CA: {0}")]
    CustomCa(String),
    #[error("registry {operation} of {reference}: {message}")]
    Registry {
        operation: &'static str,
        reference: String,
        message: String,
        /// The registry was not there to answer (no connection, a timeout,
        /// a 5xx or 429 answer): a read to retry, not a verdict on the
        /// artifact.
        unavailable: bool,
    },
    #[error("{what} of {reference} is {size} bytes, over the limit of {limit}")]
    TooLarge {
        what: String,
        reference: String,
        size: u64,
        limit: u64,
    },
    #[error("{what} of {reference}: digest {actual} where {expected} was expected")]
    DigestMismatch {
        what: String,
        reference: String,
        expected: String,
        actual: String,
    },
    #[error("manifest {digest}: {reason}")]
    Manifest { digest: String, reason: String },
    #[error("artifact {digest} is {actual}, not {expected}: {reason}")]
    ArtifactType {
        digest: String,
        expected: String,
        actual: String,
        reason: String,
    },
}

impl OciError {
    /// Whether the registry was not there to answer, rather than answering
    /// something refused.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            OciError::Registry {
                unavailable: true,
                ..
            }
        )
    }
}

/// Whether `error` (a registry client's, or anything in its chain) says the
/// registry could not be reached or could not answer now: no connection, a
/// connection cut before or during the answer, a timeout, a 5xx or 429 answer.
pub fn unavailable(error: &(dyn std::error::Error + 'static)) -> bool {
    use oci_client::errors::OciDistributionError as E;
    use std::io::ErrorKind as K;
    let busy = |code: u16| code >= 500 || code == 429;
    let mut cause = Some(error);
    while let Some(e) = cause {
        // reqwest's request kind is the transport failing before an answer
        // (a connection closed before the message completed); a registry
        // that answered shows a status instead.
        if let Some(r) = e.downcast_ref::<reqwest::Error>()
            && (r.is_connect()
                || r.is_timeout()
                || r.is_request()
                || r.status().is_some_and(|s| busy(s.as_u16())))
        {
            return true;
        }
        if let Some(E::ServerError { code, .. }) = e.downcast_ref::<E>()
            && busy(*code)
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::ConnectionReset
                    | K::ConnectionAborted
                    | K::NotConnected
                    | K::BrokenPipe
                    | K::TimedOut
                    | K::UnexpectedEof
            ) {
                return true;
            }
            // An io::Error's source skips the error it wraps.
            if let Some(inner) = io.get_ref()
                && unavailable(inner)
            {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// `oci://host[:port]/repository[:tag][@sha256:<hex>]`, the form the Ptah
/// CLI and `spec.source.oci.url` use. No tag and no digest means `:latest`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OciReference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn valid_tag(tag: &str) -> bool {
    // The distribution spec: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}
    let mut bytes = tag.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric() || b == b'_')
        && tag.len() <= 128
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

fn valid_repository(repository: &str) -> bool {
    !repository.is_empty()
        && repository.split('/').all(|component| {
            !component.is_empty()
                && component.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
                && component
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

fn valid_host(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(']') || host.starts_with('[') => (name, Some(port)),
        _ => (host, None),
    };
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'))
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

impl FromStr for OciReference {
    type Err = OciError;

    fn from_str(input: &str) -> Result<Self, OciError> {
        // A refused reference may hold userinfo: never echo what precedes
        // an `@` in the host part.
        let host_part = input
            .strip_prefix("oci://")
            .unwrap_or(input)
            .split('/')
            .next()
            .unwrap_or_default();
        let shown = match host_part.rsplit_once('@') {
            Some((_, host)) => format!("oci://[redacted]@{host}/..."),
            None => input.chars().take(256).collect(),
        };
        let refuse = |reason: &str| OciError::Reference {
            reference: shown.clone(),
            reason: reason.to_string(),
        };
        if input.trim() != input || input.chars().any(char::is_control) {
            return Err(refuse("surrounding whitespace or control characters"));
        }
        let rest = input
            .strip_prefix("oci://")
            .ok_or_else(|| refuse("must start with oci://"))?;
        let (host, path) = rest
            .split_once('/')
            .ok_or_else(|| refuse("no repository after the registry host"))?;
        if host.contains('@') {
            return Err(refuse(
                "credentials in the reference are refused; use a Secret",
            ));
        }
        if !valid_host(host) {
            return Err(refuse("the registry host is not host[:port]"));
        }
        if path.contains('?') || path.contains('#') {
            return Err(refuse("queries and fragments are refused"));
        }
        let (name, digest) = match path.split_once('@') {
            Some((name, digest)) => {
                if !is_sha256_digest(digest) {
                    return Err(refuse("the digest must be sha256:<64 lowercase hex>"));
                }
                (name, Some(digest.to_string()))
            }
            None => (path, None),
        };
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[last_slash..].rfind(':') {
            Some(i) => {
                let split = last_slash + i;
                (&name[..split], Some(name[split + 1..].to_string()))
            }
            None => (name, None),
        };
        if !valid_repository(repository) {
            return Err(refuse(
                "the repository must be lowercase path components of [a-z0-9._-]",
            ));
        }
        if let Some(tag) = &tag
            && !valid_tag(tag)
        {
            return Err(refuse(
                "the tag must match [A-Za-z0-9_][A-Za-z0-9._-]{0,127}",
            ));
        }
        let tag = match (&tag, &digest) {
            (None, None) => Some("latest".to_string()),
            _ => tag,
        };
        Ok(OciReference {
            registry: host.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl OciReference {
    /// The same repository pinned to `digest` (no tag).
    pub fn pinned(&self, digest: &str) -> OciReference {
        OciReference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_string()),
        }
    }

    /// The reference oci-client speaks.
    pub fn client_reference(&self) -> Reference {
        match (&self.tag, &self.digest) {
            (_, Some(digest)) => Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                digest.clone(),
            ),
            (tag, None) => Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone().unwrap_or_else(|| "latest".to_string()),
            ),
        }
    }

    /// A tag of the same repository (the legacy cosign `.sig` tag, say).
    pub fn client_reference_with_tag(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag.to_string(),
        )
    }
}

/// Registry credentials. `Debug` never shows a secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
    /// A bearer token (a registry's identity token or a pre-issued token).
    Bearer {
        token: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => {
                write!(
                    f,
                    "Basic {{ username: {username:?}, password: [redacted] }}"
                )
            }
            Credentials::Bearer { .. } => f.write_str("Bearer { token: [redacted] }"),
        }
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize, Default)]
struct DockerAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
    registrytoken: Option<String>,
}

/// The host[:port] a `config.json` `auths` key names: keys may be bare hosts
/// or URLs (`https://index.docker.io/v1/`).
fn docker_config_host(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

impl Credentials {
    /// The credentials for `registry` (host[:port]) in a Docker `config.json`
    /// (the `.dockerconfigjson` key of a `kubernetes.io/dockerconfigjson`
    /// Secret). No entry for the registry means anonymous. Credential
    /// helpers and stores cannot run in a Pod and are not read.
    pub fn from_docker_config(json: &[u8], registry: &str) -> Result<Credentials, OciError> {
        let config: DockerConfig = serde_json::from_slice(json).map_err(|e| {
            // serde_json's message names a line and column, never the value.
            OciError::Credentials(format!("the Docker config.json does not parse: {e}"))
        })?;
        let wanted = if registry == "docker.io" {
            "index.docker.io"
        } else {
            registry
        };
        let Some(entry) = config
            .auths
            .iter()
            .find(|(key, _)| docker_config_host(key) == wanted)
            .map(|(_, entry)| entry)
        else {
            return Ok(Credentials::Anonymous);
        };
        if let Some(token) = entry
            .registrytoken
            .as_ref()
            .or(entry.identitytoken.as_ref())
            .filter(|t| !t.is_empty())
        {
            return Ok(Credentials::Bearer {
                token: token.clone(),
            });
        }
        if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
            return Ok(Credentials::Basic {
                username: username.clone(),
                password: password.clone(),
            });
        }
        if let Some(auth) = &entry.auth {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| {
                    OciError::Credentials(format!(
                        "auths.{registry}.auth of the Docker config.json is not base64"
                    ))
                })?;
            let decoded = String::from_utf8(decoded).map_err(|_| {
                OciError::Credentials(format!(
                    "auths.{registry}.auth of the Docker config.json is not UTF-8"
                ))
            })?;
            let (username, password) = decoded.split_once(':').ok_or_else(|| {
                OciError::Credentials(format!(
                    "auths.{registry}.auth of the Docker config.json is not user:password"
                ))
            })?;
            return Ok(Credentials::Basic {
                username: username.to_string(),
                password: password.to_string(),
            });
        }
        Err(OciError::Credentials(format!(
            "auths.{registry} of the Docker config.json has neither auth, username/password nor a token"
        )))
    }

    fn registry_auth(&self) -> RegistryAuth {
        match self {
            Credentials::Anonymous => RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Credentials::Bearer { token } => RegistryAuth::Bearer(token.clone()),
        }
    }

    fn secrets(&self) -> Vec<String> {
        let mut secrets = match self {
            Credentials::Anonymous => vec![],
            Credentials::Basic { password, .. } => {
                let mut s = vec![password.clone()];
                if let Credentials::Basic { username, password } = self {
                    s.push(
                        base64::engine::general_purpose::STANDARD
                            .encode(format!("{username}:{password}")),
                    );
                }
                s
            }
            Credentials::Bearer { token } => vec![token.clone()],
        };
        secrets.retain(|s| !s.is_empty());
        secrets
    }
}

/// How to reach the registry.
#[derive(Clone, Debug, Default)]
pub struct Transport {
    /// Plain HTTP, only when asked (tests, air-gapped registries).
    pub plain_http: bool,
    /// Extra trusted CA certificates, PEM (one or more).
    pub ca_pem: Option<Vec<u8>>,
}

/// Size bounds on what a source may make us read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub max_manifest_bytes: u64,
    pub max_layers: usize,
    pub max_layer_bytes: u64,
    pub max_total_bytes: u64,
}

impl Default for Limits {
    /// A manifest of 256 KiB holds thousands of layer descriptors; the layer
    /// and total bounds are the Ptah CLI's own (64 MiB a file, 512 MiB in
    /// all, 10,000 files).
    fn default() -> Self {
        Limits {
            max_manifest_bytes: 256 * 1024,
            max_layers: 10_000,
            max_layer_bytes: 64 * 1024 * 1024,
            max_total_bytes: 512 * 1024 * 1024,
        }
    }
}

/// A layer of a resolved artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerDigest {
    pub digest: String,
    pub media_type: String,
    pub size: u64,
    /// `org.opencontainers.image.title`: the file's relative path.
    pub title: String,
}

/// What Resolve answers: the typed result document of an OCI resolution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// The reference as the resource names it.
    pub reference: String,
    /// The same repository pinned to the digest: what every later step uses.
    pub resolved_reference: String,
    /// `sha256:<hex>` of the manifest bytes.
    pub digest: String,
    /// Flux-style revision: `<tag>@sha256:<hex>`.
    pub revision: String,
    pub artifact_type: String,
    pub manifest_size: u64,
    pub layers: Vec<LayerDigest>,
    pub annotations: BTreeMap<String, String>,
}

/// A manifest read by digest and checked.
#[derive(Clone, Debug)]
pub struct FetchedManifest {
    pub digest: String,
    pub bytes: Vec<u8>,
    pub manifest: OciImageManifest,
}

/// A layer read by digest and checked.
#[derive(Clone, Debug)]
pub struct FetchedLayer {
    pub layer: LayerDigest,
    pub bytes: Vec<u8>,
}

/// One OCI source: a reference, its credentials and transport, its bounds.
pub struct OciSource {
    client: Client,
    reference: OciReference,
    credentials: Credentials,
    limits: Limits,
    plain_http: bool,
}

impl fmt::Debug for OciSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OciSource")
            .field("reference", &self.reference.to_string())
            .field("credentials", &self.credentials)
            .field("limits", &self.limits)
            .finish()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// oci-client configuration for a transport: HTTPS unless plain HTTP was
/// asked for; the custom CA added to the roots; no platform resolution (an
/// artifact is never a platform image).
pub fn client_config(transport: &Transport) -> Result<ClientConfig, OciError> {
    let mut extra_root_certificates = vec![];
    if let Some(pem) = &transport.ca_pem {
        let text = std::str::from_utf8(pem)
            .map_err(|_| OciError::CustomCa("the CA bundle is not PEM text".into()))?;
        let count = text.matches("-----BEGIN CERTIFICATE-----").count();
        if count == 0 {
            return Err(OciError::CustomCa(
                "the CA bundle holds no PEM certificate".into(),
            ));
        }
        // One entry per certificate: reqwest reads one PEM block each.
        for block in text.split_inclusive("-----END CERTIFICATE-----") {
            if let Some(start) = block.find("-----BEGIN CERTIFICATE-----") {
                extra_root_certificates.push(Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: block.as_bytes()[start..].to_vec(),
                });
            }
        }
    }
    Ok(ClientConfig {
        protocol: if transport.plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates,
        platform_resolver: None,
        read_timeout: Some(std::time::Duration::from_secs(60)),
        connect_timeout: Some(std::time::Duration::from_secs(10)),
        ..Default::default()
    })
}

impl OciSource {
    pub fn new(
        reference: OciReference,
        credentials: Credentials,
        transport: &Transport,
        limits: Limits,
    ) -> Result<OciSource, OciError> {
        Ok(OciSource {
            client: Client::new(client_config(transport)?),
            reference,
            credentials,
            limits,
            plain_http: transport.plain_http,
        })
    }

    pub fn reference(&self) -> &OciReference {
        &self.reference
    }

    pub fn plain_http(&self) -> bool {
        self.plain_http
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The oci-client this source talks through (authenticated on first use).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn registry_auth(&self) -> RegistryAuth {
        self.credentials.registry_auth()
    }

    /// `message` with every credential of this source replaced.
    pub fn redact(&self, message: &str) -> String {
        let mut message = message.to_string();
        for secret in self.credentials.secrets() {
            message = message.replace(&secret, "[redacted]");
        }
        message
    }

    pub(crate) fn registry_error(
        &self,
        operation: &'static str,
        reference: &Reference,
        error: impl std::error::Error + 'static,
    ) -> OciError {
        let unavailable = unavailable(&error);
        // The whole chain: the transport's cause is what a person acts on.
        let mut text = error.to_string();
        let mut cause = error.source();
        while let Some(c) = cause {
            let more = c.to_string();
            if !text.contains(&more) {
                text.push_str(": ");
                text.push_str(&more);
            }
            cause = c.source();
        }
        let mut message = self.redact(&text);
        if !self.plain_http && answered_plain_http(&message) {
            message.push_str(
                "; the registry answered plain HTTP to HTTPS: \
                 spec.source.oci.transport.plainHTTP reaches a registry without TLS",
            );
        }
        OciError::Registry {
            operation,
            reference: reference.whole(),
            message,
            unavailable,
        }
    }

    /// Resolve: the digest the reference names now. A digest in the
    /// reference is the answer itself, checked to exist; a tag is read by a
    /// HEAD (or GET) of the manifest.
    pub async fn resolve_digest(&self) -> Result<String, OciError> {
        let reference = self.reference.client_reference();
        let digest = self
            .client
            .fetch_manifest_digest(&reference, &self.registry_auth())
            .await
            .map_err(|e| self.registry_error("resolve", &reference, e))?;
        if !is_sha256_digest(&digest) {
            return Err(OciError::Registry {
                operation: "resolve",
                reference: reference.whole(),
                message: format!("the registry answered a digest that is not sha256: {digest:?}"),
                unavailable: false,
            });
        }
        if let Some(pinned) = &self.reference.digest
            && pinned != &digest
        {
            return Err(OciError::DigestMismatch {
                what: "manifest".into(),
                reference: reference.whole(),
                expected: pinned.clone(),
                actual: digest,
            });
        }
        Ok(digest)
    }

    /// Reads a manifest by digest (of this repository), bounded and checked.
    pub async fn fetch_manifest(&self, digest: &str) -> Result<FetchedManifest, OciError> {
        self.fetch_manifest_of(&self.reference.pinned(digest).client_reference(), digest)
            .await
    }

    pub(crate) async fn fetch_manifest_of(
        &self,
        reference: &Reference,
        digest: &str,
    ) -> Result<FetchedManifest, OciError> {
        if !is_sha256_digest(digest) {
            return Err(OciError::Manifest {
                digest: digest.chars().take(80).collect(),
                reason: "not a sha256 digest".into(),
            });
        }
        let (bytes, _) = self
            .client
            .pull_manifest_raw(reference, &self.registry_auth(), &[OCI_MANIFEST])
            .await
            .map_err(|e| self.registry_error("manifest read", reference, e))?;
        read_manifest(&reference.whole(), digest, &bytes, &self.limits)
    }

    /// Resolve: the tag to a digest, the manifest by that digest, its type
    /// checked against `expected`, its layers listed.
    pub async fn resolve(&self, expected: ArtifactKind) -> Result<Resolution, OciError> {
        let digest = self.resolve_digest().await?;
        let fetched = self.fetch_manifest(&digest).await?;
        // Resolve pins the digest; Verify inspects the pinned artifact's type
        // and refuses another one, a verdict rather than a failed read. An
        // artifact of another type is recorded as it declares itself, with
        // no layers: nothing reads them past Verify.
        let (artifact_type, layers) = match check_artifact(&fetched, expected) {
            Ok(layers) => (expected.artifact_type().to_string(), layers),
            Err(OciError::ArtifactType { actual, .. }) => (actual, Vec::new()),
            Err(e) => return Err(e),
        };
        let tag = self
            .reference
            .tag
            .clone()
            .unwrap_or_else(|| "latest".into());
        Ok(Resolution {
            reference: self.reference.to_string(),
            resolved_reference: self.reference.pinned(&digest).to_string(),
            revision: format!("{tag}@{digest}"),
            digest,
            artifact_type,
            manifest_size: fetched.bytes.len() as u64,
            layers,
            annotations: fetched.manifest.annotations.clone().unwrap_or_default(),
        })
    }

    /// Fetch by digest: the manifest, its type, then every layer, each
    /// bounded and checked against its descriptor's digest and size.
    pub async fn fetch(
        &self,
        digest: &str,
        expected: ArtifactKind,
    ) -> Result<Vec<FetchedLayer>, OciError> {
        let fetched = self.fetch_manifest(digest).await?;
        let layers = check_artifact(&fetched, expected)?;
        let total: u64 = layers.iter().map(|l| l.size).sum();
        if total > self.limits.max_total_bytes {
            return Err(OciError::TooLarge {
                what: "the layers in all".into(),
                reference: self.reference.pinned(digest).to_string(),
                size: total,
                limit: self.limits.max_total_bytes,
            });
        }
        let reference = self.reference.pinned(digest).client_reference();
        let mut out = Vec::with_capacity(layers.len());
        for (layer, descriptor) in layers.into_iter().zip(&fetched.manifest.layers) {
            let bytes = self
                .fetch_blob(&reference, descriptor, self.limits.max_layer_bytes)
                .await?;
            out.push(FetchedLayer { layer, bytes });
        }
        Ok(out)
    }

    /// A blob of `descriptor`, refused before reading when its declared size
    /// is over `limit`, and while reading when the registry sends more than
    /// declared; its digest is checked.
    pub(crate) async fn fetch_blob(
        &self,
        reference: &Reference,
        descriptor: &OciDescriptor,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let what = format!("blob {}", descriptor.digest);
        let declared = u64::try_from(descriptor.size).map_err(|_| OciError::Manifest {
            digest: descriptor.digest.clone(),
            reason: "negative size".into(),
        })?;
        if declared > limit {
            return Err(OciError::TooLarge {
                what,
                reference: reference.whole(),
                size: declared,
                limit,
            });
        }
        if !is_sha256_digest(&descriptor.digest) {
            return Err(OciError::Manifest {
                digest: descriptor.digest.chars().take(80).collect(),
                reason: "a layer digest that is not sha256".into(),
            });
        }
        self.client
            .store_auth_if_needed(reference.resolve_registry(), &self.registry_auth())
            .await;
        let mut stream = self
            .client
            .pull_blob_stream(reference, descriptor)
            .await
            .map_err(|e| self.registry_error("blob read", reference, e))?;
        let mut bytes = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
        while let Some(chunk) = stream.stream.next().await {
            let chunk = chunk.map_err(|e| self.registry_error("blob read", reference, e))?;
            if (bytes.len() + chunk.len()) as u64 > declared {
                return Err(OciError::TooLarge {
                    what: format!("{what} (more than its declared size)"),
                    reference: reference.whole(),
                    size: (bytes.len() + chunk.len()) as u64,
                    limit: declared,
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        let actual = sha256_hex(&bytes);
        if actual != descriptor.digest {
            return Err(OciError::DigestMismatch {
                what,
                reference: reference.whole(),
                expected: descriptor.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }
}

/// The manifest bytes a registry answered for `digest` (of `reference`), read
/// as the digest says: within the size bound, of exactly that SHA-256, an
/// OCI image manifest (its media type, if given, that one), with no more
/// layers than the bound. Each refusal names the bound, the digest or the
/// field (`layers[0].size: invalid type: …`). Pure: the registry's answer in,
/// no request made.
pub fn read_manifest(
    reference: &str,
    digest: &str,
    bytes: &[u8],
    limits: &Limits,
) -> Result<FetchedManifest, OciError> {
    if bytes.len() as u64 > limits.max_manifest_bytes {
        return Err(OciError::TooLarge {
            what: "manifest".into(),
            reference: reference.to_string(),
            size: bytes.len() as u64,
            limit: limits.max_manifest_bytes,
        });
    }
    let actual = sha256_hex(bytes);
    if actual != digest {
        return Err(OciError::DigestMismatch {
            what: "manifest".into(),
            reference: reference.to_string(),
            expected: digest.to_string(),
            actual,
        });
    }
    let manifest: OciImageManifest =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes))
            .map_err(|e| OciError::Manifest {
                digest: digest.to_string(),
                reason: format!("not an OCI image manifest: {e}"),
            })?;
    if manifest
        .media_type
        .as_deref()
        .is_some_and(|m| m != OCI_MANIFEST)
    {
        return Err(OciError::Manifest {
            digest: digest.to_string(),
            reason: format!(
                "mediaType {:?} is not {OCI_MANIFEST}",
                manifest.media_type.as_deref().unwrap_or_default()
            ),
        });
    }
    if manifest.layers.len() > limits.max_layers {
        return Err(OciError::TooLarge {
            what: "layer count".into(),
            reference: reference.to_string(),
            size: manifest.layers.len() as u64,
            limit: limits.max_layers as u64,
        });
    }
    Ok(FetchedManifest {
        digest: digest.to_string(),
        bytes: bytes.to_vec(),
        manifest,
    })
}

/// A referrer (a manifest the referrers API lists for `subject`, read with
/// [`read_manifest`]) must name `subject` in its own `subject`: an index
/// entry alone proves nothing about what the manifest refers to.
pub fn check_referrer(referrer: &FetchedManifest, subject: &str) -> Result<(), OciError> {
    let reason = match referrer.manifest.subject.as_ref() {
        Some(s) if s.digest == subject => return Ok(()),
        Some(_) => "subject.digest: names another artifact",
        None => "subject: missing, so the manifest refers to nothing",
    };
    Err(OciError::Manifest {
        digest: referrer.digest.clone(),
        reason: reason.into(),
    })
}

/// The artifact type a manifest declares: `artifactType` (OCI 1.1), else the
/// config media type (older oras and flux pushes), else none.
pub fn declared_artifact_type(manifest: &OciImageManifest) -> Option<&str> {
    manifest
        .artifact_type
        .as_deref()
        .filter(|t| !t.is_empty())
        .or_else(|| Some(manifest.config.media_type.as_str()).filter(|t| *t != OCI_EMPTY_CONFIG))
}

fn safe_relative_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && !path.chars().any(char::is_control)
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Checks that a manifest is the `expected` Ptah artifact, independently of
/// any verification policy: its declared type, the kind annotation if
/// present, the config, each layer's media type and title. Answers the
/// layers.
pub fn check_artifact(
    fetched: &FetchedManifest,
    expected: ArtifactKind,
) -> Result<Vec<LayerDigest>, OciError> {
    let manifest = &fetched.manifest;
    let want = expected.artifact_type();
    let refuse = |actual: &str, reason: String| OciError::ArtifactType {
        digest: fetched.digest.clone(),
        expected: want.to_string(),
        actual: actual.to_string(),
        reason,
    };
    let declared = declared_artifact_type(manifest).unwrap_or("(no artifact type)");
    if declared != want {
        return Err(refuse(
            declared,
            "the manifest declares another type".into(),
        ));
    }
    // artifactType and a typed config must not disagree.
    if manifest.artifact_type.is_some()
        && manifest.config.media_type != OCI_EMPTY_CONFIG
        && manifest.config.media_type != want
    {
        return Err(refuse(
            &manifest.config.media_type,
            "the config media type disagrees with artifactType".into(),
        ));
    }
    if let Some(kind) = manifest
        .annotations
        .as_ref()
        .and_then(|a| a.get(KIND_ANNOTATION))
        && kind != want
    {
        return Err(refuse(
            kind,
            format!("annotation {KIND_ANNOTATION} disagrees"),
        ));
    }
    if expected == ArtifactKind::Flux {
        // One tarball, untitled: the layer source-controller extracts is
        // the one Verify reads.
        return match manifest.layers.as_slice() {
            [layer] if layer.media_type == FLUX_CONTENT_LAYER_TYPE => Ok(vec![LayerDigest {
                digest: layer.digest.clone(),
                media_type: layer.media_type.clone(),
                size: u64::try_from(layer.size).unwrap_or_default(),
                title: String::new(),
            }]),
            layers => Err(refuse(
                declared,
                format!(
                    "a Flux artifact has exactly one {FLUX_CONTENT_LAYER_TYPE} layer, this one has {} layer(s) of types {}",
                    layers.len(),
                    layers
                        .iter()
                        .map(|l| l.media_type.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        };
    }
    if expected == ArtifactKind::Schema && manifest.layers.len() != 1 {
        return Err(refuse(
            declared,
            format!(
                "a schema artifact has exactly one layer, this one has {}",
                manifest.layers.len()
            ),
        ));
    }
    if manifest.layers.is_empty() {
        return Err(refuse(declared, "no layers".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    manifest
        .layers
        .iter()
        .map(|layer| {
            if layer.media_type != expected.layer_media_type() {
                return Err(refuse(
                    declared,
                    format!(
                        "layer {} has media type {}, not {}",
                        layer.digest,
                        layer.media_type,
                        expected.layer_media_type()
                    ),
                ));
            }
            let title = layer
                .annotations
                .as_ref()
                .and_then(|a| a.get(TITLE_ANNOTATION))
                .ok_or_else(|| {
                    refuse(
                        declared,
                        format!("layer {} has no {TITLE_ANNOTATION}", layer.digest),
                    )
                })?;
            if !safe_relative_path(title) || !seen.insert(title.clone()) {
                return Err(refuse(
                    declared,
                    format!(
                        "layer {} has an unsafe or repeated title {title:?}",
                        layer.digest
                    ),
                ));
            }
            Ok(LayerDigest {
                digest: layer.digest.clone(),
                media_type: layer.media_type.clone(),
                size: u64::try_from(layer.size).unwrap_or(0),
                title: title.clone(),
            })
        })
        .collect()
}

/// Whether a registry error says the TLS handshake met a plain HTTP answer
/// (as rustls reports a non-TLS record, or a Go registry says it).
fn answered_plain_http(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "http response to https",
        "invalidcontenttype",
        "corrupt message",
    ]
    .iter()
    .any(|s| m.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_registry_away_or_busy_is_unavailable_and_an_answer_is_not() {
        use oci_client::errors::OciDistributionError as E;
        use std::io::{Error, ErrorKind};
        let server = |code: u16| E::ServerError {
            code,
            url: "http://r/v2/".into(),
            message: String::new(),
        };
        for busy in [server(500), server(503), server(429)] {
            assert!(unavailable(&busy), "{busy}");
        }
        let cut = Error::new(ErrorKind::ConnectionReset, "reset by peer");
        assert!(unavailable(&cut));
        // Wrapped, as a blob stream's chunk error is.
        let wrapped = Error::other(Error::from(ErrorKind::ConnectionRefused));
        assert!(unavailable(&wrapped));
        for answered in [
            server(404),
            server(401),
            E::ImageManifestNotFoundError("gone".into()),
            E::UnauthorizedError { url: "u".into() },
        ] {
            assert!(!unavailable(&answered), "{answered}");
        }
        assert!(!unavailable(&Error::other("not a transport error")));
    }

    /// A registry that closes the connection before its answer, or halfway
    /// through a blob, is away, not a registry that answered: the fault sweep
    /// saw a signature blob cut this way read as "no signature".
    #[tokio::test]
    async fn a_connection_cut_before_or_during_the_answer_is_unavailable() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v2/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            // The first connection is closed once the request is in.
            let (mut first, _) = listener.accept().await.unwrap();
            let _ = first.read(&mut [0; 1024]).await;
            drop(first);
            // The second answers 100 bytes' worth of headers and sends 10.
            let (mut second, _) = listener.accept().await.unwrap();
            let _ = second.read(&mut [0; 1024]).await;
            second
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
                .await
                .unwrap();
            drop(second);
        });
        let client = reqwest::Client::new();
        let closed = client.get(&url).send().await.unwrap_err();
        assert!(unavailable(&closed), "{closed:?}");
        let mut answer = client.get(&url).send().await.unwrap();
        let cut = loop {
            match answer.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a body cut short ended as if whole"),
                Err(e) => break e,
            }
        };
        assert!(unavailable(&cut), "{cut:?}");
        server.await.unwrap();
    }

    #[test]
    fn references_parse_with_tag_digest_or_latest() {
        let r: OciReference = "oci://127.0.0.1:5000/ptah/schema:v1".parse().unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "ptah/schema");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest, None);
        let r: OciReference = format!("oci://reg.example/a/b@{D}").parse().unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(D));
        let r: OciReference = format!("oci://reg.example/a:v2@{D}").parse().unwrap();
        assert_eq!(r.tag.as_deref(), Some("v2"));
        assert_eq!(r.to_string(), format!("oci://reg.example/a:v2@{D}"));
        let r: OciReference = "oci://reg.example/a".parse().unwrap();
        assert_eq!(r.tag.as_deref(), Some("latest"));
    }

    #[test]
    fn bad_references_are_refused_with_a_reason_and_no_credentials() {
        for (input, reason) in [
            ("reg.example/a:v1", "oci://"),
            ("oci://reg.example", "no repository"),
            ("oci://user:hunter2@reg.example/a:v1", "credentials"),
            ("oci://reg.example/A:v1", "lowercase"),
            ("oci://reg.example/a:v1?x=1", "queries"),
            ("oci://reg.example/a@sha256:abc", "digest"),
            (" oci://reg.example/a", "whitespace"),
            ("oci://reg.example/a:-bad", "tag"),
        ] {
            let err = input.parse::<OciReference>().unwrap_err().to_string();
            assert!(err.contains(reason), "{input}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn docker_config_gives_basic_or_token_and_never_shows_them() {
        let auth = base64::engine::general_purpose::STANDARD.encode("robot:s3cret");
        let json = format!(
            r#"{{"auths":{{"https://reg.example:5000/v1/":{{"auth":"{auth}"}},"tok.example":{{"identitytoken":"tkn-123"}}}}}}"#
        );
        let basic = Credentials::from_docker_config(json.as_bytes(), "reg.example:5000").unwrap();
        assert_eq!(
            basic,
            Credentials::Basic {
                username: "robot".into(),
                password: "s3cret".into()
            }
        );
        assert!(!format!("{basic:?}").contains("s3cret"));
        let bearer = Credentials::from_docker_config(json.as_bytes(), "tok.example").unwrap();
        assert!(matches!(bearer, Credentials::Bearer { .. }));
        assert!(!format!("{bearer:?}").contains("tkn-123"));
        assert_eq!(
            Credentials::from_docker_config(json.as_bytes(), "other.example").unwrap(),
            Credentials::Anonymous
        );
        let err = Credentials::from_docker_config(br#"{"auths":{"x":{"auth":"%%"}}}"#, "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not base64"), "{err}");
    }

    /// A registry that answers plain HTTP to the TLS handshake: the error
    /// names the transport field that reaches it.
    #[tokio::test]
    async fn a_registry_answering_plain_http_to_https_names_transport_plain_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let reference: OciReference = format!("oci://127.0.0.1:{port}/ptah/schema:v1")
            .parse()
            .unwrap();
        let source = OciSource::new(
            reference,
            Credentials::Anonymous,
            &Transport::default(),
            Limits::default(),
        )
        .unwrap();
        let err = source.resolve_digest().await.unwrap_err().to_string();
        assert!(err.contains("spec.source.oci.transport.plainHTTP"), "{err}");
        assert!(!answered_plain_http("connection refused"));
    }

    #[test]
    fn a_custom_ca_must_hold_a_certificate() {
        let err = client_config(&Transport {
            plain_http: false,
            ca_pem: Some(b"not pem".to_vec()),
        })
        .err()
        .expect("refused");
        assert!(err.to_string().contains("no PEM certificate"));
    }

    fn manifest(
        artifact_type: Option<&str>,
        config: &str,
        layer: &str,
        title: &str,
    ) -> FetchedManifest {
        let json = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": {"mediaType": config, "digest": D, "size": 2},
            "layers": [{"mediaType": layer, "digest": D, "size": 10,
                        "annotations": {TITLE_ANNOTATION: title}}],
        });
        let bytes = serde_json::to_vec(&json).unwrap();
        FetchedManifest {
            digest: sha256_hex(&bytes),
            manifest: serde_json::from_slice(&bytes).unwrap(),
            bytes,
        }
    }

    #[test]
    fn a_flux_artifact_is_one_tarball_and_never_a_ptah_one() {
        let flux = manifest(None, FLUX_CONFIG_TYPE, FLUX_CONTENT_LAYER_TYPE, "");
        let layers = check_artifact(&flux, ArtifactKind::Flux).expect("a Flux artifact");
        assert_eq!(layers.len(), 1);
        assert!(check_artifact(&flux, ArtifactKind::Schema).is_err());
        let schema = manifest(
            Some(SCHEMA_ARTIFACT_TYPE),
            OCI_EMPTY_CONFIG,
            SCHEMA_LAYER_TYPE,
            "schema.hcl",
        );
        assert!(check_artifact(&schema, ArtifactKind::Flux).is_err());
        let other_layer = manifest(None, FLUX_CONFIG_TYPE, SCHEMA_LAYER_TYPE, "x");
        let err = check_artifact(&other_layer, ArtifactKind::Flux)
            .unwrap_err()
            .to_string();
        assert!(err.contains("exactly one"), "{err}");
    }

    #[test]
    fn a_schema_artifact_never_stands_in_for_migrations() {
        let schema = manifest(
            Some(SCHEMA_ARTIFACT_TYPE),
            OCI_EMPTY_CONFIG,
            SCHEMA_LAYER_TYPE,
            "schema.hcl",
        );
        assert_eq!(
            check_artifact(&schema, ArtifactKind::Schema).unwrap().len(),
            1
        );
        let err = check_artifact(&schema, ArtifactKind::Migrations)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not application/vnd.stokaro.ptah.migrations.v1"),
            "{err}"
        );
        // oras/flux style: the type in the config media type.
        let by_config = manifest(
            None,
            MIGRATIONS_ARTIFACT_TYPE,
            MIGRATION_FILE_LAYER_TYPE,
            "0001_init.up.sql",
        );
        assert!(check_artifact(&by_config, ArtifactKind::Migrations).is_ok());
        assert!(check_artifact(&by_config, ArtifactKind::Schema).is_err());
        let unsafe_title = manifest(
            Some(MIGRATIONS_ARTIFACT_TYPE),
            OCI_EMPTY_CONFIG,
            MIGRATION_FILE_LAYER_TYPE,
            "../etc/passwd",
        );
        assert!(check_artifact(&unsafe_title, ArtifactKind::Migrations).is_err());
    }
}
