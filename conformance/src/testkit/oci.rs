//! OCI artifacts and cosign signatures as the tests make them: the harness's
//! registries, the Ptah-shaped artifact (`ptah schema push`'s manifest), and
//! cosign run offline with a private HOME. The push itself stays with the
//! tests' OCI client; what is shared is the shape of what they push and how
//! they sign it, so every test pushes and signs the same thing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use crate::gitserve::parse_env_file;
use crate::harness::Harness;

/// The media type of an OCI 1.1 image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The empty config of an artifact (`{}`), as oras-go packs it.
pub const EMPTY_CONFIG_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// The harness's registries and the pinned cosign, from its env file.
pub struct Registry {
    /// host:port of distribution v3, plain HTTP: no referrers API, cosign
    /// uses the tag fallback.
    pub host: String,
    /// host:port of `oci-registry`, the one with the OCI 1.1 referrers API.
    pub referrers_host: String,
    /// The pinned cosign binary.
    pub cosign: PathBuf,
}

impl Registry {
    /// Reads the registries of the running harness. Without them no OCI test
    /// can run, so a missing entry is an error naming it.
    pub fn from_harness(harness: &Harness) -> anyhow::Result<Registry> {
        let vars = parse_env_file(&harness.env().context("the harness env file")?)?;
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .with_context(|| format!("{k} not in env file"))
        };
        Ok(Registry {
            host: get("PTAH_REGISTRY")?,
            referrers_host: get("PTAH_REFERRERS_REGISTRY")?,
            cosign: PathBuf::from(get("PTAH_TOOLS_BIN")?).join("cosign"),
        })
    }
}

/// `sha256:<hex>` of `bytes`: the digest the registries and the manifests
/// name blobs by.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// 16 random bytes in hex: a password for a cosign key (never printed) or a
/// credential no other run shares.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("reading /dev/urandom");
    hex::encode(bytes)
}

/// How an artifact declares its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declared {
    /// OCI 1.1 `artifactType`, empty config (`ptah ... push`, oras-go).
    ArtifactType,
    /// The config media type, no `artifactType` (older oras, flux push).
    ConfigMediaType,
}

/// One file as a Ptah-shaped artifact: an OCI 1.1 image manifest with the
/// empty config (inline), one titled layer, and the Ptah kind annotation.
/// The manifest is written as JSON because the typed manifest of oci-client
/// has no `data` field.
#[derive(Debug, Clone)]
pub struct Artifact<'a> {
    pub artifact_type: &'a str,
    pub layer_type: &'a str,
    /// The layer's `org.opencontainers.image.title` (its file name).
    pub title: &'a str,
    pub content: &'a [u8],
    pub declared: Declared,
    /// Manifest annotations besides `io.stokaro.ptah.kind`.
    pub annotations: Map<String, Value>,
}

/// What to push for an [`Artifact`]: the blobs with their digests, then the
/// manifest, whose digest is the artifact's.
#[derive(Debug, Clone)]
pub struct Packed {
    /// (bytes, digest): the empty config, then the layer.
    pub blobs: Vec<(Vec<u8>, String)>,
    /// The manifest, pushed as [`OCI_MANIFEST`].
    pub manifest: Vec<u8>,
    /// The manifest's digest.
    pub digest: String,
}

impl<'a> Artifact<'a> {
    /// `content` as an artifact of `artifact_type` with one `layer_type`
    /// layer titled `title`, declared by `artifactType`.
    pub fn new(
        artifact_type: &'a str,
        layer_type: &'a str,
        title: &'a str,
        content: &'a [u8],
    ) -> Self {
        Artifact {
            artifact_type,
            layer_type,
            title,
            content,
            declared: Declared::ArtifactType,
            annotations: Map::new(),
        }
    }

    /// Declares the type as `declared` says.
    pub fn declared(mut self, declared: Declared) -> Self {
        self.declared = declared;
        self
    }

    /// Adds a manifest annotation.
    pub fn annotation(mut self, key: &str, value: impl Into<String>) -> Self {
        self.annotations
            .insert(key.to_owned(), Value::String(value.into()));
        self
    }

    /// Adds `org.opencontainers.image.created` as now, as the CLI stamps it.
    pub fn created_now(self) -> Self {
        self.annotation(
            "org.opencontainers.image.created",
            jiff::Timestamp::now().to_string(),
        )
    }

    /// The blobs and the manifest to push.
    pub fn pack(&self) -> anyhow::Result<Packed> {
        let config = b"{}";
        let config_digest = sha256(config);
        let layer_digest = sha256(self.content);
        let mut annotations = self.annotations.clone();
        annotations.insert("io.stokaro.ptah.kind".into(), json!(self.artifact_type));
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": self.artifact_type,
            "config": {
                "mediaType": EMPTY_CONFIG_TYPE,
                "digest": config_digest,
                "size": config.len(),
                "data": "e30=",
            },
            "layers": [{
                "mediaType": self.layer_type,
                "digest": layer_digest,
                "size": self.content.len(),
                "annotations": {"org.opencontainers.image.title": self.title},
            }],
            "annotations": annotations,
        });
        if self.declared == Declared::ConfigMediaType {
            if let Some(m) = manifest.as_object_mut() {
                m.remove("artifactType");
            }
            manifest["config"] = json!({
                "mediaType": self.artifact_type, "digest": config_digest, "size": config.len(),
            });
        }
        let manifest = serde_json::to_vec(&manifest)?;
        Ok(Packed {
            blobs: vec![
                (config.to_vec(), config_digest),
                (self.content.to_vec(), layer_digest),
            ],
            digest: sha256(&manifest),
            manifest,
        })
    }
}

/// cosign with a private HOME and Docker config, so nothing of the user's
/// leaks in and nothing is left behind.
pub fn cosign(bin: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("HOME", home)
        .env("DOCKER_CONFIG", home.join("docker"))
        .env_remove("COSIGN_PASSWORD")
        .env_remove("COSIGN_EXPERIMENTAL");
    cmd
}

/// Runs a cosign command; a failure is an error with its stderr, named
/// `what`.
pub fn run_ok(what: &str, cmd: &mut Command) -> anyhow::Result<std::process::Output> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out)
}

/// A cosign key pair on disk.
#[derive(Debug, Clone)]
pub struct Key {
    /// The encrypted private key (`cosign.key`).
    pub private: PathBuf,
    /// The public key file (`cosign.pub`).
    pub public: PathBuf,
    /// The public key's PEM, as a verification policy holds it.
    pub public_pem: String,
    /// The private key's password.
    pub password: String,
}

/// Makes a cosign key pair in `dir`, encrypted with `password`.
pub fn key_pair(cosign_bin: &Path, dir: &Path, password: &str) -> anyhow::Result<Key> {
    std::fs::create_dir_all(dir)?;
    run_ok(
        "cosign generate-key-pair",
        cosign(cosign_bin, dir)
            .current_dir(dir)
            .env("COSIGN_PASSWORD", password)
            .arg("generate-key-pair"),
    )?;
    let public = dir.join("cosign.pub");
    Ok(Key {
        private: dir.join("cosign.key"),
        public_pem: std::fs::read_to_string(&public)?,
        public,
        password: password.to_owned(),
    })
}

/// `cosign sign` of `reference` with `key`, offline: a keyed signature, no
/// transparency log, no signing config from the public TUF repository, plain
/// HTTP to the loopback registry. `--tlog-upload` is deprecated in v3 in
/// favour of a signing config file, but with one cosign still reaches for
/// the public TUF repository; this form stays offline. `legacy` writes the
/// old simple-signing `.sig` tag instead of v3's sigstore bundle; a
/// certificate and its chain, when given, sign keyless-style.
pub fn sign_command(
    cosign_bin: &Path,
    work: &Path,
    key: &Key,
    reference: &str,
    legacy: bool,
    certificate: Option<(&Path, &Path)>,
) -> Command {
    let mut cmd = cosign(cosign_bin, work);
    cmd.env("COSIGN_PASSWORD", &key.password)
        .args(["sign", "--yes", "--allow-http-registry"])
        .args(["--use-signing-config=false", "--tlog-upload=false"]);
    if legacy {
        cmd.arg("--new-bundle-format=false");
    }
    if let Some((cert, chain)) = certificate {
        cmd.arg("--certificate")
            .arg(cert)
            .arg("--certificate-chain")
            .arg(chain);
    }
    cmd.arg("--key").arg(&key.private).arg(reference);
    cmd
}

/// `cosign verify` of `reference` with the public key file `public`,
/// offline (no transparency log).
pub fn verify_command(cosign_bin: &Path, work: &Path, public: &Path, reference: &str) -> Command {
    let mut cmd = cosign(cosign_bin, work);
    cmd.args([
        "verify",
        "--allow-http-registry",
        "--insecure-ignore-tlog=true",
    ])
    .arg("--key")
    .arg(public)
    .arg(reference);
    cmd
}

/// Pushes one file over plain HTTP as an artifact of `artifact_type`, in the
/// shape of `ptah schema push` (one layer titled `schema.hcl`); answers the
/// manifest digest.
pub async fn push_artifact(
    tagged: &str,
    artifact_type: &str,
    schema: &[u8],
) -> anyhow::Result<String> {
    use oci_client::client::{Client, ClientConfig, ClientProtocol};
    let packed = Artifact::new(
        artifact_type,
        supplychain::oci::SCHEMA_LAYER_TYPE,
        "schema.hcl",
        schema,
    )
    .annotation(
        "org.opencontainers.image.source",
        "https://git.example/acme/schemas",
    )
    .pack()?;
    let client = Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        platform_resolver: None,
        ..Default::default()
    });
    let reference: oci_client::Reference = tagged.parse()?;
    client
        .store_auth_if_needed(
            reference.resolve_registry(),
            &oci_client::secrets::RegistryAuth::Anonymous,
        )
        .await;
    for (blob, digest) in packed.blobs {
        client.push_blob(&reference, blob, &digest).await?;
    }
    client
        .push_manifest_raw(
            &reference,
            packed.manifest,
            http::HeaderValue::from_static(OCI_MANIFEST),
        )
        .await?;
    Ok(packed.digest)
}

/// Pushes a schema artifact; answers the manifest digest.
pub async fn push_schema(tagged: &str, schema: &[u8]) -> anyhow::Result<String> {
    push_artifact(tagged, supplychain::oci::SCHEMA_ARTIFACT_TYPE, schema).await
}

/// A verification policy trusting one key for schema artifacts, with legacy
/// `.sig` signatures, under the authority `release`.
pub fn key_policy(public_pem: &str) -> String {
    let pem: String = public_pem
        .lines()
        .map(|l| format!("        {l}\n"))
        .collect();
    format!(
        "apiVersion: supplychain.ptah.run/v1alpha1\nkind: VerificationPolicy\n\
         artifactTypes: [{}]\nsignatures:\n  formats: [legacy]\n\
         authorities:\n  - name: release\n    key:\n      pem: |\n{pem}",
        supplychain::oci::SCHEMA_ARTIFACT_TYPE
    )
}
