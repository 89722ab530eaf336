//! Stage 1, the source: what `spec.source` names and what `status.source`
//! records once it is resolved (see `shared/spec/sources.md`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConfigMapKeyRef, NameRef, pattern};

/// Where the declared schema or the migration directory comes from: exactly one
/// of `configMap`, `git`, `oci` and `flux`, and the policy that checks it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("(has(self.configMap) ? 1 : 0) + (has(self.git) ? 1 : 0) + (has(self.oci) ? 1 : 0) + (has(self.flux) ? 1 : 0) == 1")
    .message("spec.source must set exactly one of configMap, git, oci or flux"))]
#[x_kube(validation = Rule::new("!has(self.oci) || has(self.verificationPolicyFrom)")
    .message("spec.source.verificationPolicyFrom is required with an oci source"))]
#[x_kube(validation = Rule::new("!has(self.verificationPolicyFrom) || has(self.oci) || (has(self.flux) && self.flux.kind == 'OCIRepository')")
    .message("spec.source.verificationPolicyFrom applies to an oci source or a flux OCIRepository only"))]
#[x_kube(validation = Rule::new("!has(self.sourcePolicyFrom) || has(self.configMap) || has(self.git)")
    .message("spec.source.sourcePolicyFrom applies to configMap and git sources; an oci source or a flux OCIRepository is checked by verificationPolicyFrom"))]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Files held in a ConfigMap of the resource's namespace. The manager
    /// copies the selected keys into an immutable snapshot `ptah-src-<hash>`,
    /// and every operation reads the snapshot, never the ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// Files at a path of a Git repository, at a branch, a tag or a commit.
    /// Only Jobs reach the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// An OCI artifact pushed by `ptah schema push` or `ptah migrations push`
    /// (or oras / flux with the same artifact type), verified before it is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
    /// A Flux `GitRepository` or `OCIRepository` of the resource's namespace,
    /// by name: its artifact is fetched from source-controller by a Resolve
    /// Job, checked against the digest its status names, and snapshotted
    /// like a ConfigMap source. Flux's revision is bound into every plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxSource>,
    /// A ConfigMap key holding the source policy that a configMap or git source
    /// is checked against at Resolve (ConfigMap name and size, Git host, size of
    /// the selected files). Bound into every plan; a replaced policy is read at
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_policy_from: Option<ConfigMapKeyRef>,
    /// A ConfigMap key holding the sigstore verification policy an oci source
    /// must satisfy (required with `oci`; with a flux `OCIRepository`, the
    /// manifest digest Flux reports is verified against it, not trusted). Bound by UID and digest into every
    /// plan; a replaced or edited policy sends the resource back to Verifying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_policy_from: Option<ConfigMapKeyRef>,
}

/// The one source a [`Source`] selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectedSource<'a> {
    /// `spec.source.configMap`.
    ConfigMap(&'a ConfigMapSource),
    /// `spec.source.git`.
    Git(&'a GitSource),
    /// `spec.source.oci`.
    Oci(&'a OciSource),
    /// `spec.source.flux`.
    Flux(&'a FluxSource),
}

impl Source {
    /// The selected source, or `None` when the spec sets none or several (the
    /// API server refuses both; an object stored before the rule existed may
    /// still hold them).
    pub fn selected(&self) -> Option<SelectedSource<'_>> {
        match (&self.config_map, &self.git, &self.oci, &self.flux) {
            (Some(c), None, None, None) => Some(SelectedSource::ConfigMap(c)),
            (None, Some(g), None, None) => Some(SelectedSource::Git(g)),
            (None, None, Some(o), None) => Some(SelectedSource::Oci(o)),
            (None, None, None, Some(f)) => Some(SelectedSource::Flux(f)),
            _ => None,
        }
    }

    /// The kind of the selected source.
    pub fn kind(&self) -> Option<SourceKind> {
        self.selected().map(|s| match s {
            SelectedSource::ConfigMap(_) => SourceKind::ConfigMap,
            SelectedSource::Git(_) => SourceKind::Git,
            SelectedSource::Oci(_) => SourceKind::OCI,
            SelectedSource::Flux(_) => SourceKind::Flux,
        })
    }

    /// Whether a Verify Job checks the source: an OCI artifact, or a Flux
    /// `OCIRepository` under a verification policy.
    pub fn verified(&self) -> bool {
        self.oci.is_some()
            || (self
                .flux
                .as_ref()
                .is_some_and(|f| f.kind == FluxSourceKind::OCIRepository)
                && self.verification_policy_from.is_some())
    }
}

/// A Flux source object, by name, in the resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxSource {
    /// `GitRepository` or `OCIRepository` (`source.toolkit.fluxcd.io/v1`).
    pub kind: FluxSourceKind,
    /// Name of the object.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// Directory or file inside the artifact, relative to its root. Unset is
    /// the root. The directory's files are taken; a subdirectory is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')")
        .message("spec.source.flux.path must be relative to the artifact's root and must not contain '..'"))]
    pub path: Option<String>,
}

/// The Flux source kinds the operator reads.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum FluxSourceKind {
    /// `GitRepository`.
    GitRepository,
    /// `OCIRepository`.
    OCIRepository,
}

impl FluxSourceKind {
    /// The kind as Flux spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GitRepository => "GitRepository",
            Self::OCIRepository => "OCIRepository",
        }
    }

    /// The plural of the kind's resource.
    pub fn plural(self) -> &'static str {
        match self {
            Self::GitRepository => "gitrepositories",
            Self::OCIRepository => "ocirepositories",
        }
    }
}

/// Files taken from keys of a ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// Name of the ConfigMap, in the resource's namespace. It is watched: an
    /// edit is read at once, not at the interval.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// The keys taken as files, each file named as its key. Unset selects every
    /// key of `data` and `binaryData`. An edit to an unselected key changes
    /// nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub keys: Vec<String>,
}

/// Files at a path of a Git repository.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: `https://`, `http://`, `ssh://`, `git://` or `file://`.
    /// Credentials never go in the URL; they go in the Secret `secretRef` names.
    #[schemars(length(min = 1, max = 2048), regex(pattern = pattern::GIT_URL))]
    #[x_kube(validation = Rule::new("!self.matches('^[a-z]+://[^/@]*:[^/@]*@') && !self.matches('^(https?|git)://[^/]*@')")
        .message("spec.source.git.url must not carry credentials (user:password@ or token@): put them in the Secret named by spec.source.git.secretRef"))]
    pub url: String,
    /// The commit to read: exactly one of a branch (read at its tip every
    /// interval), a tag (annotated tags are peeled) or a commit id.
    #[serde(rename = "ref")]
    pub git_ref: GitRef,
    /// Directory or file inside the repository, relative to its root. Unset is
    /// the root. A submodule or an LFS pointer at this path is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')")
        .message("spec.source.git.path must be relative to the repository root and must not contain '..'"))]
    pub path: Option<String>,
    /// A Secret in the resource's namespace with the credentials, in Flux's
    /// keys: `username` and `password`, or `bearerToken`, for HTTPS; `identity`
    /// (a private key) and `known_hosts` (required: the host key is pinned) for
    /// SSH. Only the fetching init container receives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<NameRef>,
}

/// A branch, a tag or a commit: exactly one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("(has(self.branch) ? 1 : 0) + (has(self.tag) ? 1 : 0) + (has(self.commit) ? 1 : 0) == 1")
    .message("spec.source.git.ref must set exactly one of branch, tag or commit"))]
#[serde(rename_all = "camelCase")]
pub struct GitRef {
    /// A branch, read at its tip: a new commit that leaves the selected files
    /// as they were keeps the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), regex(pattern = pattern::GIT_REF_NAME))]
    pub branch: Option<String>,
    /// A tag; an annotated tag is peeled to its commit. A tag stays on one
    /// commit on every server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), regex(pattern = pattern::GIT_REF_NAME))]
    pub tag: Option<String>,
    /// A commit id, 40 lowercase hex digits. Fetched by id only where the
    /// server's advertisement allows it (a branch or tag points at it, or the
    /// server gives reachable commits by id); otherwise Resolve is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::GIT_COMMIT))]
    pub commit: Option<String>,
}

/// An OCI artifact.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// Reference of the artifact, `oci://<registry>/<repository>:<tag>` or
    /// `…@sha256:<digest>`. A tag is resolved to its manifest digest once per
    /// cycle; every later operation of the cycle uses only the digest.
    #[serde(rename = "ociRef")]
    #[schemars(length(min = 7, max = 1024), regex(pattern = pattern::OCI_REF))]
    #[x_kube(validation = Rule::new("!self.matches('^oci://[^/]*@')")
        .message("spec.source.oci.ociRef must not carry credentials (user:password@): name a Secret in spec.source.oci.registryAuthFrom"))]
    pub oci_ref: String,
    /// Registry credentials: a Secret in the resource's namespace, never read by
    /// the manager. Unset pulls anonymously.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_auth_from: Option<RegistryAuth>,
    /// How the registry is reached: HTTPS by default, a custom CA, or plain
    /// HTTP when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<OciTransport>,
}

/// How registry credentials reach the fetching container.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RegistryAuthMode {
    /// User name and password, or an identity token, as environment variables.
    #[default]
    Environment,
    /// A Docker `config.json` file.
    DockerConfigJSON,
}

fn default_username_key() -> String {
    "username".into()
}
fn default_password_key() -> String {
    "password".into()
}
fn default_token_key() -> String {
    "token".into()
}
fn default_docker_config_json_key() -> String {
    ".dockerconfigjson".into()
}

/// A Secret with registry credentials. Besides the keys below, the Secret's
/// owner sets `registry`, the exact `host[:port]` the credentials are for: a
/// request to any other authority stops before it is sent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryAuth {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::DNS_SUBDOMAIN))]
    pub name: String,
    /// `Environment` (user name and password, or a token) or `DockerConfigJSON`.
    #[serde(default)]
    pub mode: RegistryAuthMode,
    /// Key of the user name, in `Environment` mode.
    #[serde(default = "default_username_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY))]
    pub username_key: String,
    /// Key of the password, in `Environment` mode.
    #[serde(default = "default_password_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY))]
    pub password_key: String,
    /// Key of an identity token, in `Environment` mode.
    #[serde(default = "default_token_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY))]
    pub token_key: String,
    /// Key of the Docker `config.json`, in `DockerConfigJSON` mode.
    #[serde(
        rename = "dockerConfigJSONKey",
        default = "default_docker_config_json_key"
    )]
    #[schemars(length(min = 1, max = 253), regex(pattern = pattern::CONFIG_MAP_KEY))]
    pub docker_config_json_key: String,
}

/// How the registry is reached.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("!(has(self.plainHTTP) && self.plainHTTP && has(self.caFrom))")
    .message("spec.source.oci.transport: plainHTTP and caFrom exclude each other"))]
#[serde(rename_all = "camelCase")]
pub struct OciTransport {
    /// Speak plain HTTP to the registry: for tests and air-gapped mirrors only.
    #[serde(rename = "plainHTTP", default)]
    pub plain_http: bool,
    /// A ConfigMap key with the CA bundle (PEM) that signs the registry's
    /// certificate, snapshotted once per Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_from: Option<ConfigMapKeyRef>,
}

/// The kind of a source.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum SourceKind {
    /// A ConfigMap, snapshotted by the manager.
    ConfigMap,
    /// A Git repository, resolved by a Job.
    Git,
    /// An OCI artifact, resolved and verified by Jobs.
    OCI,
    /// A Flux source's artifact, fetched by a Resolve Job and snapshotted.
    Flux,
}

/// A ConfigMap source as resolved.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapResolution {
    /// Name of the source ConfigMap.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the source ConfigMap: another ConfigMap of the same name retires
    /// the plan.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// Name of the immutable snapshot ConfigMap (`ptah-src-<hash>`) every
    /// operation mounts.
    #[schemars(length(max = 253))]
    pub snapshot_name: String,
    /// UID of the snapshot ConfigMap.
    #[serde(
        rename = "snapshotUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub snapshot_uid: Option<String>,
}

/// A Git source as resolved.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitResolution {
    /// The repository URL the Resolve Job answered for.
    #[schemars(length(max = 2048))]
    pub url: String,
    /// The ref it read: `refs/heads/<branch>`, `refs/tags/<tag>`, or the commit.
    #[serde(rename = "ref")]
    #[schemars(length(max = 512))]
    pub git_ref: String,
    /// The path it selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// The commit, 40 lowercase hex digits.
    #[schemars(regex(pattern = pattern::GIT_COMMIT))]
    pub commit: String,
    /// SHA-256 of the repository URL and the path, bound into plans so another
    /// repository or path retires them even with equal files.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub location_digest: String,
}

/// An OCI source as resolved.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciResolution {
    /// The reference as the spec requested it.
    #[schemars(length(max = 1024))]
    pub requested_reference: String,
    /// The same reference pinned by digest; the only one later operations use.
    #[schemars(length(max = 1024))]
    pub resolved_reference: String,
    /// Digest of the manifest.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub digest: String,
    /// Media type of the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub media_type: Option<String>,
    /// Artifact type of the manifest, checked independently of the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub artifact_type: Option<String>,
    /// Size of the manifest in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Digests of the layers, checked when an operation fetches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(regex(pattern = pattern::SHA256_DIGEST)))]
    pub layer_digests: Vec<String>,
}

/// A Flux source as resolved: the object, the artifact its status named,
/// and the snapshot of the files at the path.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxResolution {
    /// `GitRepository` or `OCIRepository`.
    pub kind: FluxSourceKind,
    /// Name of the object.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the object: another object of the same name retires the plan.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// SHA-256 of the artifact's tarball, as the object's status named it
    /// and the Resolve Job found it.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub artifact_digest: String,
    /// The path selected in the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// Name of the immutable snapshot ConfigMap (`ptah-src-<hash>`) every
    /// operation mounts.
    #[schemars(length(max = 253))]
    pub snapshot_name: String,
    /// UID of the snapshot ConfigMap.
    #[serde(
        rename = "snapshotUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub snapshot_uid: Option<String>,
}

/// A policy ConfigMap as read: bound by UID and the digest of its bytes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyBinding {
    /// Name of the ConfigMap.
    #[schemars(length(max = 253))]
    pub name: String,
    /// The key read.
    #[schemars(length(max = 253))]
    pub key: String,
    /// UID of the ConfigMap: a recreated ConfigMap is another policy.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// SHA-256 of the bytes of the key.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub digest: String,
}

/// A keyless signer: the certificate's OIDC issuer and subject.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignerIdentity {
    /// OIDC issuer of the signing certificate.
    #[schemars(length(max = 1024))]
    pub issuer: String,
    /// Subject of the signing certificate (an e-mail or a workflow URI).
    #[schemars(length(max = 1024))]
    pub subject: String,
}

/// What Verify established: these bytes, signed by this identity under this
/// root, accepted by this policy. Bound into every plan computed from it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationEvidence {
    /// The verification policy, by UID and digest.
    pub policy: PolicyBinding,
    /// The authority of the policy that accepted the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub authority: Option<String>,
    /// The keyless signer, when a certificate signed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_identity: Option<SignerIdentity>,
    /// SHA-256 fingerprint of the public key or certificate that signed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub key_fingerprint: Option<String>,
    /// SHA-256 of the trusted root (`trusted_root.json`) the chain was checked
    /// against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub trust_root_digest: Option<String>,
    /// Digest of the signature (bundle or legacy `.sig` manifest) accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub signature_digest: Option<String>,
    /// Whether a transparency-log entry was verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparency_log_verified: Option<bool>,
    /// When Verify accepted the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Time>,
}

/// `status.source`: the resolution every later operation is bound to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// `ConfigMap`, `Git`, `OCI` or `Flux`.
    pub kind: SourceKind,
    /// The revision in Flux's form: `<configmap>@sha256:<content digest>`,
    /// `<branch or tag>@sha1:<commit>` (`sha1:<commit>` for a commit) or
    /// `<tag>@sha256:<manifest digest>`; a Flux source's is Flux's own.
    #[schemars(length(max = 512))]
    pub revision: String,
    /// SHA-256 of the content manifest of the selected files (ConfigMap, Git),
    /// or the manifest digest (OCI).
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub content_digest: String,
    /// When the source was resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Time>,
    /// The pinned ConfigMap and its snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapResolution>,
    /// The pinned repository, path and commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitResolution>,
    /// The reference resolved to a digest (OCI, and a Flux `OCIRepository`
    /// under a verification policy: what Verify checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciResolution>,
    /// The Flux object, its artifact and the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxResolution>,
    /// The source policy the resolution was checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_policy: Option<PolicyBinding>,
    /// The verification evidence (OCI only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationEvidence>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map() -> ConfigMapSource {
        ConfigMapSource {
            name: "schema".into(),
            keys: Vec::new(),
        }
    }

    #[test]
    fn selected_is_the_one_source_or_none() {
        let mut source = Source {
            config_map: Some(config_map()),
            git: None,
            oci: None,
            flux: None,
            source_policy_from: None,
            verification_policy_from: None,
        };
        assert_eq!(source.kind(), Some(SourceKind::ConfigMap));
        source.oci = Some(OciSource {
            oci_ref: "oci://r.example/a/b:v1".into(),
            registry_auth_from: None,
            transport: None,
        });
        assert_eq!(source.selected(), None, "two sources select none");
        source.config_map = None;
        assert_eq!(source.kind(), Some(SourceKind::OCI));
        source.oci = None;
        assert_eq!(source.kind(), None);
    }
}
