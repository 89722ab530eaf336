//! OCI artifacts and cosign signatures as the tests make them: the harness's
//! registries, Ptah's own artifacts pushed by the pinned Ptah CLI (`ptah
//! schema push`, `ptah migrations push`), and cosign run offline with a
//! private HOME. Both tools run with a private HOME and Docker config and a
//! cleared environment, so nothing of the user's (credentials, a `PTAH_*`
//! flag variable, CI provenance) leaks in and nothing is left behind.
//!
//! Two artifacts the CLI cannot make on purpose are pushed with oci-client
//! instead, each by a narrowly named helper that says why:
//! [`push_foreign_type`] and [`push_config_typed`].

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

/// How an oci-client artifact declares its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    /// OCI 1.1 `artifactType`, empty config, the kind annotation (the shape
    /// of the Ptah CLI).
    ArtifactType,
    /// The config media type, no `artifactType` and no Ptah annotation
    /// (older oras, `flux push artifact`).
    ConfigMediaType,
}

/// One file as an artifact with one titled layer, for the helpers that push
/// what the Ptah CLI cannot make. The manifest is written as JSON because
/// the typed manifest of oci-client has no `data` field.
struct Foreign<'a> {
    artifact_type: &'a str,
    layer_type: &'a str,
    /// The layer's `org.opencontainers.image.title` (its file name).
    title: &'a str,
    content: &'a [u8],
    declared: Declared,
}

impl Foreign<'_> {
    /// The manifest, which names the config `{}` and the layer.
    fn manifest(&self) -> anyhow::Result<Vec<u8>> {
        let config = b"{}";
        let config_digest = sha256(config);
        let layer_digest = sha256(self.content);
        let mut annotations = Map::new();
        annotations.insert(
            "org.opencontainers.image.source".into(),
            json!(ARTIFACT_SOURCE),
        );
        annotations.insert(
            "org.opencontainers.image.created".into(),
            json!(jiff::Timestamp::now().to_string()),
        );
        let config_descriptor = match self.declared {
            Declared::ArtifactType => {
                annotations.insert("io.stokaro.ptah.kind".into(), json!(self.artifact_type));
                json!({
                    "mediaType": EMPTY_CONFIG_TYPE, "digest": config_digest,
                    "size": config.len(), "data": "e30=",
                })
            }
            Declared::ConfigMediaType => json!({
                "mediaType": self.artifact_type, "digest": config_digest, "size": config.len(),
            }),
        };
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": config_descriptor,
            "layers": [{
                "mediaType": self.layer_type,
                "digest": layer_digest,
                "size": self.content.len(),
                "annotations": {"org.opencontainers.image.title": self.title},
            }],
            "annotations": Value::Object(annotations),
        });
        if self.declared == Declared::ArtifactType {
            manifest["artifactType"] = json!(self.artifact_type);
        }
        Ok(serde_json::to_vec(&manifest)?)
    }

    /// Pushes the blobs and the manifest over plain HTTP to `tagged`
    /// (`host:port/repository:tag`).
    async fn push(&self, tagged: &str) -> anyhow::Result<Pushed> {
        use oci_client::client::{Client, ClientConfig, ClientProtocol};
        let manifest = self.manifest()?;
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
        for blob in [b"{}".as_slice(), self.content] {
            client
                .push_blob(&reference, blob.to_vec(), &sha256(blob))
                .await?;
        }
        let digest = sha256(&manifest);
        client
            .push_manifest_raw(
                &reference,
                manifest,
                http::HeaderValue::from_static(OCI_MANIFEST),
            )
            .await?;
        Pushed::new(tagged, digest)
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

/// A new key pair in `work/<name>` (password `pw`) that has signed
/// `pinned` (`host/repository@digest`) with a legacy `.sig`, as
/// [`key_policy`] accepts.
pub fn signed_by_new_key(
    registry: &Registry,
    work: &Path,
    name: &str,
    pinned: &str,
) -> anyhow::Result<Key> {
    let key = key_pair(&registry.cosign, &work.join(name), "pw")?;
    run_ok(
        "cosign sign",
        &mut sign_command(&registry.cosign, work, &key, pinned, true, None),
    )?;
    Ok(key)
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

/// The `org.opencontainers.image.source` every pushed artifact carries (the
/// CLI's `PTAH_OCI_SOURCE`), so a policy can require it.
pub const ARTIFACT_SOURCE: &str = "https://git.example/acme/schemas";

/// An artifact in a registry, as its push answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest digest, `sha256:<hex>`.
    pub digest: String,
    /// `host:port/repository@<digest>`: the form cosign signs.
    pub pinned: String,
}

impl Pushed {
    /// The push to `tagged` (`host:port/repository:tag`) answered `digest`.
    fn new(tagged: &str, digest: String) -> anyhow::Result<Pushed> {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("the push of {tagged} answered {digest:?}, not a sha256 digest");
        }
        let tagged = tagged.strip_prefix("oci://").unwrap_or(tagged);
        let last_slash = tagged.rfind('/').map_or(0, |i| i + 1);
        let repository = match tagged[last_slash..].rfind(':') {
            Some(i) => &tagged[..last_slash + i],
            None => tagged,
        };
        Ok(Pushed {
            pinned: format!("{repository}@{digest}"),
            digest,
        })
    }

    /// `oci://host:port/repository@<digest>`, as `spec.source.oci` and the
    /// CLI name it.
    pub fn url(&self) -> String {
        format!("oci://{}", self.pinned)
    }
}

/// A directory removed when dropped: the private HOME of one CLI run and
/// the files it pushes.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(super::unique("ptah-oci"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the pinned Ptah CLI with `args`, plain HTTP to the loopback
/// registry, in a cleared environment: HOME and the Docker config in
/// `scratch` (no credentials: the harness registries are anonymous), the
/// provenance source [`ARTIFACT_SOURCE`], and no `PTAH_*` variable of the
/// caller's (the CLI reads every flag from one: a `PTAH_VERSION`, the pin's
/// name in pins.env, would become a write-once `--version` tag), nor CI
/// provenance (`GITHUB_*`). Answers stdout.
async fn ptah(scratch: &Scratch, args: &[&std::ffi::OsStr]) -> anyhow::Result<String> {
    let bin = crate::tools::tool("ptah")?;
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &scratch.0)
        .env("DOCKER_CONFIG", scratch.0.join("docker"))
        .env("PTAH_OCI_SOURCE", ARTIFACT_SOURCE)
        .args(args)
        .arg("--plain-http")
        .current_dir(&scratch.0)
        .kill_on_drop(true);
    let shown = args
        .iter()
        .take(2)
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd
        .output()
        .await
        .with_context(|| format!("running ptah {shown}"))?;
    if !out.status.success() {
        bail!(
            "ptah {shown}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The `Digest:` line a `ptah ... push` printed.
fn printed_digest(stdout: &str) -> anyhow::Result<String> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Digest: "))
        .map(|d| d.trim().to_owned())
        .with_context(|| format!("no Digest: line in the push's output: {stdout}"))
}

/// `oci://` before `tagged` unless it is there.
fn oci_url(tagged: &str) -> String {
    if tagged.starts_with("oci://") {
        tagged.to_owned()
    } else {
        format!("oci://{tagged}")
    }
}

/// `ptah schema push` of `schema` (Atlas HCL) to `tagged`
/// (`host:port/repository:tag`, plain HTTP): the CLI parses it and stores
/// its canonical rendering as the one `schema.hcl` layer, so the layer is
/// not `schema` byte for byte ([`pull_schema`] reads it back). Only the
/// named tag is written. Answers the manifest digest the CLI printed.
pub async fn push_schema(tagged: &str, schema: &[u8]) -> anyhow::Result<Pushed> {
    push_schema_file(tagged, "schema.hcl", schema).await
}

/// [`push_schema`] of a file named `file_name`, whose extension tells the CLI
/// what it holds (`schema.sql`: SQL DDL, rendered as the same canonical
/// `schema.hcl`).
pub async fn push_schema_file(
    tagged: &str,
    file_name: &str,
    schema: &[u8],
) -> anyhow::Result<Pushed> {
    let scratch = Scratch::new()?;
    let file = scratch.0.join(file_name);
    std::fs::write(&file, schema)?;
    let url = oci_url(tagged);
    let out = ptah(
        &scratch,
        &[
            "schema".as_ref(),
            "push".as_ref(),
            url.as_ref(),
            "--schema-file".as_ref(),
            file.as_os_str(),
        ],
    )
    .await?;
    Pushed::new(tagged, printed_digest(&out)?)
}

/// `ptah schema pull` of `pinned` (`host:port/repository@<digest>`): the
/// canonical `schema.hcl` as the CLI validates and reads it.
pub async fn pull_schema(pinned: &str) -> anyhow::Result<Vec<u8>> {
    let scratch = Scratch::new()?;
    let file = scratch.0.join("pulled").join("schema.hcl");
    let url = oci_url(pinned);
    ptah(
        &scratch,
        &[
            "schema".as_ref(),
            "pull".as_ref(),
            url.as_ref(),
            "--out".as_ref(),
            file.as_os_str(),
        ],
    )
    .await?;
    Ok(std::fs::read(&file)?)
}

/// `ptah migrations push` of the directory `dir` to `tagged`
/// (`host:port/repository:tag`, plain HTTP): one layer per migration file,
/// titled with its relative path, the format detected (`auto`). Only the
/// named tag is written. Answers the manifest digest the CLI printed.
pub async fn push_migrations_dir(tagged: &str, dir: &Path) -> anyhow::Result<Pushed> {
    let scratch = Scratch::new()?;
    let url = oci_url(tagged);
    let out = ptah(
        &scratch,
        &[
            "migrations".as_ref(),
            "push".as_ref(),
            url.as_ref(),
            "--migrations-dir".as_ref(),
            dir.as_os_str(),
        ],
    )
    .await?;
    Pushed::new(tagged, printed_digest(&out)?)
}

/// [`push_migrations_dir`] of a directory holding `files` (relative path,
/// content), e.g. `("0001_init.up.sql", b"create table ...")`.
pub async fn push_migrations(tagged: &str, files: &[(&str, &[u8])]) -> anyhow::Result<Pushed> {
    let scratch = Scratch::new()?;
    let dir = scratch.0.join("migrations");
    for (path, content) in files {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, content)?;
    }
    push_migrations_dir(tagged, &dir).await
}

/// Pushes, with oci-client, `schema` in the shape of `ptah schema push` (the
/// empty config, one `schema.hcl` layer of the schema layer type, the kind
/// annotation) but declaring `artifact_type`. The CLI always stamps its own
/// type, and a test of the artifact type check needs an artifact of another
/// one that is otherwise Ptah's.
pub async fn push_foreign_type(
    tagged: &str,
    artifact_type: &str,
    schema: &[u8],
) -> anyhow::Result<Pushed> {
    Foreign {
        artifact_type,
        layer_type: supplychain::oci::SCHEMA_LAYER_TYPE,
        title: "schema.hcl",
        content: schema,
        declared: Declared::ArtifactType,
    }
    .push(tagged)
    .await
}

/// Pushes, with oci-client, one file as an artifact typed by its config
/// media type `artifact_type` with no `artifactType`, as older oras and
/// `flux push artifact` pack: supplychain accepts that form from other
/// tools, and the Ptah CLI packs only the OCI 1.1 one.
pub async fn push_config_typed(
    tagged: &str,
    artifact_type: &str,
    layer_type: &str,
    title: &str,
    content: &[u8],
) -> anyhow::Result<Pushed> {
    Foreign {
        artifact_type,
        layer_type,
        title,
        content,
        declared: Declared::ConfigMediaType,
    }
    .push(tagged)
    .await
}
/// A verification policy trusting one key for schema artifacts, with legacy
/// `.sig` signatures, under the authority `release`.
pub fn key_policy(public_pem: &str) -> String {
    key_policy_of(public_pem, supplychain::oci::SCHEMA_ARTIFACT_TYPE)
}

/// A policy trusting `public_pem` for artifacts of `artifact_type` only.
pub fn key_policy_of(public_pem: &str, artifact_type: &str) -> String {
    key_policy_for(public_pem, &format!("artifactTypes: [{artifact_type}]\n"))
}

/// [`key_policy`] naming no artifact type: it accepts the type the source
/// expects, which Verify checks on its own.
pub fn key_policy_any_type(public_pem: &str) -> String {
    key_policy_for(public_pem, "")
}

fn key_policy_for(public_pem: &str, types: &str) -> String {
    let pem: String = public_pem
        .lines()
        .map(|l| format!("        {l}\n"))
        .collect();
    format!(
        "apiVersion: supplychain.ptah.run/v1alpha1\nkind: VerificationPolicy\n\
         {types}signatures:\n  formats: [legacy]\n\
         authorities:\n  - name: release\n    key:\n      pem: |\n{pem}"
    )
}
