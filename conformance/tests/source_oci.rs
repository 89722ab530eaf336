//! OCI sources against the harness's real registries, with artifacts pushed
//! by the real pinned Ptah CLI and signatures made by the real pinned
//! cosign, offline: Resolve (tag to digest, a moved tag), the artifact type
//! check, and the sigstore verification policy — keyed
//! legacy `.sig` signatures, sigstore bundles found as referrers, keyless
//! signatures under a test trusted root (a test CA issuing Fulcio-style
//! certificates), regex identities, the transparency-log requirement — and
//! that credentials never show in errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;
use conformance::testkit::oci::{
    self, Key, Registry, pull_schema, push_config_typed, push_migrations, random_hex, sha256,
    sign_command,
};
use conformance::testkit::unique;
use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use supplychain::oci::{
    ArtifactKind, Credentials, Limits, MIGRATION_FILE_LAYER_TYPE, MIGRATIONS_ARTIFACT_TYPE,
    OciError, OciReference, OciSource, SCHEMA_ARTIFACT_TYPE, Transport,
};
use supplychain::verification::{
    API_VERSION, CompiledPolicy, KIND, Refusal, SignatureFormat, Signer, VerifiedEvidence,
    VerifyFailure, verify,
};

const ISSUER: &str = "https://token.ci.example";
const SUBJECT: &str =
    "https://ci.example/acme/schemas/.github/workflows/release.yml@refs/heads/main";

async fn registry() -> Registry {
    conformance::install_crypto_provider();
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    Registry::from_harness(harness).unwrap()
}

fn client() -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        platform_resolver: None,
        ..Default::default()
    })
}

/// `ptah schema push` of `schema` to `host/repository:tag`; returns the
/// manifest digest.
async fn push_schema(host: &str, repository: &str, tag: &str, schema: &[u8]) -> String {
    oci::push_schema(&format!("{host}/{repository}:{tag}"), schema)
        .await
        .expect("ptah schema push")
        .digest
}

fn source(host: &str, repository: &str, tag_or_digest: &str) -> OciSource {
    let separator = if tag_or_digest.starts_with("sha256:") {
        "@"
    } else {
        ":"
    };
    let reference: OciReference = format!("oci://{host}/{repository}{separator}{tag_or_digest}")
        .parse()
        .unwrap();
    OciSource::new(
        reference,
        Credentials::Anonymous,
        &Transport {
            plain_http: true,
            ca_pem: None,
        },
        Limits::default(),
    )
    .unwrap()
}

/// cosign with a private HOME and Docker config.
fn cosign(reg: &Registry, home: &Path) -> Command {
    oci::cosign(&reg.cosign, home)
}

fn run_ok(what: &str, cmd: &mut Command) -> Output {
    oci::run_ok(what, cmd).unwrap()
}

/// A cosign key pair in `dir` with a random password.
fn key_pair(reg: &Registry, dir: &Path) -> Key {
    oci::key_pair(&reg.cosign, dir, &random_hex()).unwrap()
}

/// Which signature cosign writes.
#[derive(Clone, Copy)]
enum Format {
    /// cosign v3's default: a sigstore bundle stored as a referrer.
    Bundle,
    /// The old simple-signing payload under the `sha256-<hex>.sig` tag.
    Legacy,
}

/// Signs `reference` with `key`, offline: no transparency log, no signing
/// config from the public TUF repository. With a certificate and its chain
/// when given (keyless-style, under our test CA).
fn sign(
    reg: &Registry,
    work: &Path,
    key: &Key,
    reference: &str,
    format: Format,
    certificate: Option<(&Path, &Path)>,
) {
    let legacy = matches!(format, Format::Legacy);
    let mut cmd = sign_command(&reg.cosign, work, key, reference, legacy, certificate);
    run_ok("cosign sign", &mut cmd);
}

fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
}

fn key_policy(name: &str, key: &Key, formats: &str, extra: &str) -> CompiledPolicy {
    let doc = format!(
        "apiVersion: {API_VERSION}\nkind: {KIND}\nartifactTypes: [{SCHEMA_ARTIFACT_TYPE}]\n\
         requiredAnnotations: [org.opencontainers.image.source]\n\
         signatures:\n  formats: {formats}\nauthorities:\n  - name: {name}\n{extra}    key:\n      pem: |\n{}",
        indent(&key.public_pem, 8)
    );
    CompiledPolicy::parse(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}

async fn verified(source: &OciSource, digest: &str, policy: &CompiledPolicy) -> VerifiedEvidence {
    verify(source, digest, ArtifactKind::Schema, policy)
        .await
        .unwrap_or_else(|r| panic!("refused: {r}"))
}

async fn refused(source: &OciSource, digest: &str, policy: &CompiledPolicy) -> Refusal {
    match verify(source, digest, ArtifactKind::Schema, policy).await {
        Ok(evidence) => panic!("accepted: {evidence:?}"),
        Err(VerifyFailure::Refused(refusal)) => refusal,
        Err(unavailable) => panic!("not refused: {unavailable}"),
    }
}

fn key_fingerprint(key: &Key) -> String {
    let body: String = key
        .public_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    sha256(
        &base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap(),
    )
}

#[tokio::test]
async fn a_tag_resolves_to_its_digest_and_a_moved_tag_to_the_new_one() {
    let reg = registry().await;
    let repository = format!("ptah-conformance/{}", unique("resolve"));
    let first = b"schema \"public\" {}\n";
    let digest = push_schema(&reg.host, &repository, "v1", first).await;
    let src = source(&reg.host, &repository, "v1");

    let resolution = src.resolve(ArtifactKind::Schema).await.unwrap();
    assert_eq!(resolution.digest, digest);
    assert_eq!(resolution.revision, format!("v1@{digest}"));
    assert_eq!(
        resolution.resolved_reference,
        format!("oci://{}/{repository}@{digest}", reg.host)
    );
    assert_eq!(resolution.artifact_type, SCHEMA_ARTIFACT_TYPE);
    // The CLI stores its canonical rendering of the schema: the layer is
    // what `ptah schema pull` reads back, not the pushed file byte for byte.
    let canonical = pull_schema(&format!("{}/{repository}@{digest}", reg.host))
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&canonical).contains("schema \"public\""),
        "{}",
        String::from_utf8_lossy(&canonical)
    );
    assert_eq!(resolution.layers.len(), 1);
    assert_eq!(resolution.layers[0].digest, sha256(&canonical));
    assert_eq!(resolution.layers[0].title, "schema.hcl");
    assert_eq!(
        resolution
            .annotations
            .get("io.stokaro.ptah.kind")
            .map(String::as_str),
        Some(SCHEMA_ARTIFACT_TYPE)
    );
    // The typed result document round-trips.
    let json = serde_json::to_string(&resolution).unwrap();
    assert_eq!(
        serde_json::from_str::<supplychain::oci::Resolution>(&json).unwrap(),
        resolution
    );

    // Fetch by digest: the bytes, their digest checked.
    let layers = src.fetch(&digest, ArtifactKind::Schema).await.unwrap();
    assert_eq!(layers[0].bytes, canonical);

    // The tag moves: the next Resolve answers the new digest, the old one
    // still fetches by digest.
    let second = b"schema \"public\" {}\nschema \"audit\" {}\n";
    let moved = push_schema(&reg.host, &repository, "v1", second).await;
    assert_ne!(moved, digest);
    assert_eq!(
        src.resolve(ArtifactKind::Schema).await.unwrap().digest,
        moved
    );
    assert_eq!(
        src.fetch(&digest, ArtifactKind::Schema).await.unwrap()[0].bytes,
        canonical
    );

    // A reference pinned by digest resolves to itself.
    let pinned = source(&reg.host, &repository, &digest);
    assert_eq!(pinned.resolve_digest().await.unwrap(), digest);

    // Size bounds: a layer over the bound and a manifest over the bound are
    // refused with the bound named.
    let small = OciSource::new(
        format!("oci://{}/{repository}:v1", reg.host)
            .parse()
            .unwrap(),
        Credentials::Anonymous,
        &Transport {
            plain_http: true,
            ca_pem: None,
        },
        Limits {
            max_layer_bytes: 8,
            ..Limits::default()
        },
    )
    .unwrap();
    let err = small.fetch(&moved, ArtifactKind::Schema).await.unwrap_err();
    assert!(matches!(err, OciError::TooLarge { limit: 8, .. }), "{err}");
    let tiny_manifest = OciSource::new(
        format!("oci://{}/{repository}:v1", reg.host)
            .parse()
            .unwrap(),
        Credentials::Anonymous,
        &Transport {
            plain_http: true,
            ca_pem: None,
        },
        Limits {
            max_manifest_bytes: 64,
            ..Limits::default()
        },
    )
    .unwrap();
    let err = tiny_manifest
        .resolve(ArtifactKind::Schema)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("manifest") && err.contains("over the limit of 64"),
        "{err}"
    );

    // A tag that does not exist is a clear registry error.
    let err = source(&reg.host, &repository, "nope")
        .resolve(ArtifactKind::Schema)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("resolve") && err.contains(":nope"), "{err}");
}

#[tokio::test]
async fn a_wrong_artifact_type_is_refused() {
    let reg = registry().await;
    let repository = format!("ptah-conformance/{}", unique("type"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    let src = source(&reg.host, &repository, "v1");

    // A schema artifact never stands in for a migration directory. Resolve
    // pins its digest and records the type it declares, with no layers;
    // fetching and verifying it as one are refused.
    let resolution = src.resolve(ArtifactKind::Migrations).await.unwrap();
    assert_eq!(resolution.digest, digest);
    assert_eq!(resolution.artifact_type, SCHEMA_ARTIFACT_TYPE);
    assert!(resolution.layers.is_empty(), "{resolution:?}");
    let err = src
        .fetch(&digest, ArtifactKind::Migrations)
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::ArtifactType { .. }), "{err}");

    // Verify checks the type independently of the policy...
    let open =
        CompiledPolicy::parse(format!("apiVersion: {API_VERSION}\nkind: {KIND}\n").as_bytes())
            .unwrap();
    let Err(VerifyFailure::Refused(refusal)) =
        verify(&src, &digest, ArtifactKind::Migrations, &open).await
    else {
        panic!("a migrations artifact read as a schema is refused");
    };
    assert_eq!(refusal.rule, "artifactType", "{refusal}");
    // ...and against the policy's list.
    let migrations_only = CompiledPolicy::parse(
        format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\nartifactTypes: [{MIGRATIONS_ARTIFACT_TYPE}]\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let refusal = refused(&src, &digest, &migrations_only).await;
    assert_eq!(refusal.rule, "artifactTypes", "{refusal}");

    // A required annotation the artifact lacks: refused, the annotation
    // named. The CLI stamps its build run only from `PTAH_OCI_BUILD_RUN` or
    // `GITHUB_RUN_ID`, which the test kit clears.
    let annotated = CompiledPolicy::parse(
        format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\nrequiredAnnotations: [io.stokaro.ptah.build-run]\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let refusal = refused(&src, &digest, &annotated).await;
    assert_eq!(
        refusal.rule,
        "requiredAnnotations[io.stokaro.ptah.build-run]"
    );
    // An artifact typed by its config media type (older oras, flux push):
    // a migration directory resolves as one, and never as a schema.
    let repository = format!("ptah-conformance/{}", unique("config-typed"));
    let migrations = push_config_typed(
        &format!("{}/{repository}:v1", reg.host),
        MIGRATIONS_ARTIFACT_TYPE,
        MIGRATION_FILE_LAYER_TYPE,
        "0001_init.up.sql",
        b"create table t (id bigint);\n",
    )
    .await
    .unwrap()
    .digest;
    let typed = source(&reg.host, &repository, "v1");
    let resolution = typed.resolve(ArtifactKind::Migrations).await.unwrap();
    assert_eq!(resolution.digest, migrations);
    assert_eq!(resolution.layers[0].title, "0001_init.up.sql");
    let other = typed.resolve(ArtifactKind::Schema).await.unwrap();
    assert_eq!(other.artifact_type, MIGRATIONS_ARTIFACT_TYPE);
    assert!(other.layers.is_empty(), "{other:?}");

    // No authorities: no signature required, and the evidence says so.
    let evidence = verified(&src, &digest, &open).await;
    assert!(evidence.signatures.is_empty());
    assert_eq!(evidence.artifact_digest, digest);
}

/// A migration directory pushed by `ptah migrations push`: one layer per
/// file, titled with its relative path, and the CLI's annotations. It
/// resolves and fetches as migrations, and never as a schema.
#[tokio::test]
async fn a_migration_directory_pushed_by_ptah_resolves_as_migrations_and_never_as_a_schema() {
    let reg = registry().await;
    let repository = format!("ptah-conformance/{}", unique("migrations"));
    let up: &[u8] = b"CREATE TABLE t (id bigint);\n";
    let down: &[u8] = b"DROP TABLE t;\n";
    let pushed = push_migrations(
        &format!("{}/{repository}:v1", reg.host),
        &[("0001_init.up.sql", up), ("0001_init.down.sql", down)],
    )
    .await
    .unwrap();
    let src = source(&reg.host, &repository, "v1");

    let resolution = src.resolve(ArtifactKind::Migrations).await.unwrap();
    assert_eq!(resolution.digest, pushed.digest);
    assert_eq!(resolution.artifact_type, MIGRATIONS_ARTIFACT_TYPE);
    let titles: Vec<&str> = resolution.layers.iter().map(|l| l.title.as_str()).collect();
    assert_eq!(titles, ["0001_init.down.sql", "0001_init.up.sql"]);
    assert!(
        resolution
            .layers
            .iter()
            .all(|l| l.media_type == MIGRATION_FILE_LAYER_TYPE),
        "{:?}",
        resolution.layers
    );
    let annotation = |k: &str| resolution.annotations.get(k).map(String::as_str);
    assert_eq!(
        annotation("io.stokaro.ptah.kind"),
        Some(MIGRATIONS_ARTIFACT_TYPE)
    );
    assert_eq!(annotation("io.stokaro.ptah.migration-format"), Some("auto"));
    assert_eq!(
        annotation("org.opencontainers.image.source"),
        Some(oci::ARTIFACT_SOURCE)
    );

    // The files are stored byte for byte.
    let layers = src
        .fetch(&pushed.digest, ArtifactKind::Migrations)
        .await
        .unwrap();
    let files: Vec<(&str, &[u8])> = layers
        .iter()
        .map(|l| (l.layer.title.as_str(), l.bytes.as_slice()))
        .collect();
    assert_eq!(
        files,
        [("0001_init.down.sql", down), ("0001_init.up.sql", up)]
    );

    // Never a schema: pinned as what it declares, with no layers, and
    // refused when fetched as one.
    let as_schema = src.resolve(ArtifactKind::Schema).await.unwrap();
    assert_eq!(as_schema.artifact_type, MIGRATIONS_ARTIFACT_TYPE);
    assert!(as_schema.layers.is_empty(), "{as_schema:?}");
    let err = src
        .fetch(&pushed.digest, ArtifactKind::Schema)
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::ArtifactType { .. }), "{err}");
}

#[tokio::test]
async fn a_keyed_legacy_signature_verifies_and_another_key_is_refused() {
    let reg = registry().await;
    let repository = format!("ptah-conformance/{}", unique("legacy"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    sign(
        &reg,
        work.path(),
        &key,
        &format!("{}/{repository}@{digest}", reg.host),
        Format::Legacy,
        None,
    );
    // The legacy `.sig` tag is there.
    let tags = client()
        .list_tags(
            &format!("{}/{repository}:v1", reg.host).parse().unwrap(),
            &RegistryAuth::Anonymous,
            None,
            None,
        )
        .await
        .unwrap();
    let sig_tag = format!("{}.sig", digest.replace(':', "-"));
    assert!(tags.tags.contains(&sig_tag), "{tags:?}");

    let src = source(&reg.host, &repository, "v1");
    let policy = key_policy("release", &key, "[legacy]", "");
    let evidence = verified(&src, &digest, &policy).await;
    assert_eq!(evidence.policy_digest, policy.digest);
    assert_eq!(evidence.artifact_digest, digest);
    let signer = &evidence.signatures[0];
    assert_eq!(signer.authority, "release");
    assert_eq!(signer.format, SignatureFormat::Legacy);
    assert_eq!(
        signer.signer,
        Signer::Key {
            key_fingerprint: key_fingerprint(&key)
        }
    );
    assert!(signer.signature_digest.starts_with("sha256:"));
    assert!(!signer.transparency_log);

    // Another key: refused, the authority named.
    let other = key_pair(&reg, &work.path().join("other"));
    let refusal = refused(
        &src,
        &digest,
        &key_policy("release", &other, "[legacy]", ""),
    )
    .await;
    assert_eq!(refusal.rule, "authorities[release]");
    assert!(
        refusal.reason.contains("no signature by this key"),
        "{refusal}"
    );

    // `all`: the signer's key and another key are both required: refused,
    // naming the unsatisfied one.
    let doc = format!(
        "apiVersion: {API_VERSION}\nkind: {KIND}\nsignatures:\n  match: all\nauthorities:\n  - name: release\n    key:\n      pem: |\n{}  - name: second\n    key:\n      pem: |\n{}",
        indent(&key.public_pem, 8),
        indent(&other.public_pem, 8)
    );
    let refusal = refused(
        &src,
        &digest,
        &CompiledPolicy::parse(doc.as_bytes()).unwrap(),
    )
    .await;
    assert_eq!(refusal.rule, "authorities[second]", "{refusal}");
}

#[tokio::test]
async fn a_sigstore_bundle_found_through_the_referrers_api_verifies() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    // The referrers API (oci-registry), then its tag fallback (distribution).
    for host in [&reg.referrers_host, &reg.host] {
        let repository = format!("ptah-conformance/{}", unique("bundle"));
        let digest = push_schema(host, &repository, "v1", b"schema \"public\" {}\n").await;
        sign(
            &reg,
            work.path(),
            &key,
            &format!("{host}/{repository}@{digest}"),
            Format::Bundle,
            None,
        );
        let src = source(host, &repository, "v1");
        let evidence = verified(&src, &digest, &key_policy("release", &key, "[bundle]", "")).await;
        let signer = &evidence.signatures[0];
        assert_eq!(signer.format, SignatureFormat::Bundle, "{host}");
        assert_eq!(
            signer.signer,
            Signer::Key {
                key_fingerprint: key_fingerprint(&key)
            }
        );
        assert_ne!(signer.signature_manifest_digest, digest);
        // The same bundle is no legacy signature.
        let refusal = refused(&src, &digest, &key_policy("release", &key, "[legacy]", "")).await;
        assert_eq!(refusal.rule, "authorities[release]");
        // And another key refuses it.
        let other = key_pair(&reg, &work.path().join(unique("other")));
        let refusal = refused(
            &src,
            &digest,
            &key_policy("release", &other, "[bundle]", ""),
        )
        .await;
        assert!(
            refusal.reason.contains("no signature by this key"),
            "{refusal}"
        );
    }
}

#[tokio::test]
async fn an_unsigned_artifact_is_refused_when_the_policy_requires_a_signature() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    for host in [&reg.referrers_host, &reg.host] {
        let repository = format!("ptah-conformance/{}", unique("unsigned"));
        let digest = push_schema(host, &repository, "v1", b"schema \"public\" {}\n").await;
        let src = source(host, &repository, "v1");
        let refusal = refused(
            &src,
            &digest,
            &key_policy("release", &key, "[bundle, legacy]", ""),
        )
        .await;
        assert_eq!(refusal.rule, "authorities[release]");
        assert!(refusal.reason.contains("no signature"), "{refusal}");
    }
}

#[tokio::test]
async fn a_registry_that_is_away_is_a_failed_read_not_a_refusal() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    let repository = format!("ptah-conformance/{}", unique("away"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    // The same artifact through a port nobody listens on: the registry is
    // away, which says nothing of the artifact or its signatures.
    let away = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = away.local_addr().unwrap().to_string();
    drop(away);
    let src = source(&host, &repository, &digest);
    let policy = key_policy("release", &key, "[bundle, legacy]", "");
    match verify(&src, &digest, ArtifactKind::Schema, &policy).await {
        Err(failure @ VerifyFailure::Unavailable(_)) => {
            let why = failure.to_string();
            assert!(why.contains(&host), "{why}");
            assert!(why.starts_with("the registry could not be read"), "{why}");
        }
        other => panic!("a registry that is away must fail the read: {other:?}"),
    }
}

/// A test certificate authority issuing Fulcio-style certificates, and the
/// sigstore `trusted_root.json` that names it.
struct TestCa {
    root: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    trusted_root: String,
}

fn test_ca() -> TestCa {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "ptah conformance fulcio");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let root =
        rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let trusted_root = trusted_root_json(root.der(), None);
    TestCa { root, trusted_root }
}

/// A sigstore `trusted_root.json` naming the CA certificate `ca_der` and,
/// when given, a Rekor log by its public key (DER SubjectPublicKeyInfo).
fn trusted_root_json(ca_der: &[u8], rekor_spki: Option<&[u8]>) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let tlogs = match rekor_spki {
        Some(spki) => serde_json::json!([{
            "baseUrl": "https://rekor.conformance.invalid",
            "hashAlgorithm": "SHA2_256",
            "publicKey": {
                "rawBytes": b64(spki),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            },
            "logId": {"keyId": b64(&sha256_bytes(spki))},
        }]),
        None => serde_json::json!([]),
    };
    serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": tlogs,
        "certificateAuthorities": [{
            "subject": {"organization": "ptah", "commonName": "ptah conformance fulcio"},
            "uri": "https://fulcio.conformance.invalid",
            "certChain": {"certificates": [{"rawBytes": b64(ca_der)}]},
            "validFor": {"start": "2020-01-01T00:00:00Z"},
        }],
        "ctlogs": [],
        "timestampAuthorities": [],
    })
    .to_string()
}

fn sha256_bytes(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

/// Ten minutes ago to an hour from now.
fn valid_now() -> std::ops::Range<std::time::SystemTime> {
    let now = std::time::SystemTime::now();
    (now - std::time::Duration::from_secs(600))..(now + std::time::Duration::from_secs(3600))
}

/// DER of a UTF8String.
fn der_utf8(s: &str) -> Vec<u8> {
    let mut out = vec![0x0c];
    let len = s.len();
    if len < 128 {
        out.push(len as u8);
    } else {
        out.extend([0x81, len as u8]);
    }
    out.extend_from_slice(s.as_bytes());
    out
}

/// A cosign key whose certificate, issued by `ca`, names `subject` (a URI or,
/// with an `@` and no scheme, an email) and `issuer` (Fulcio extensions .1.1
/// and .1.8). Returns the key and the certificate and chain files.
fn keyless_signer(
    reg: &Registry,
    dir: &Path,
    ca: &TestCa,
    subject: &str,
    issuer: &str,
    validity: std::ops::Range<std::time::SystemTime>,
) -> (Key, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![if subject.contains("://") {
        rcgen::SanType::URI(subject.try_into().unwrap())
    } else {
        rcgen::SanType::Rfc822Name(subject.try_into().unwrap())
    }];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
    params.custom_extensions = vec![
        rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 1],
            issuer.as_bytes().to_vec(),
        ),
        rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            der_utf8(issuer),
        ),
    ];
    params.not_before = validity.start.into();
    params.not_after = validity.end.into();
    let cert = params.signed_by(&leaf_key, &ca.root).unwrap();
    let cert_path = dir.join("leaf.pem");
    let chain_path = dir.join("chain.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&chain_path, ca.root.pem()).unwrap();
    // cosign signs with its own key format: import the PKCS#8 key.
    let pkcs8 = dir.join("leaf.key");
    std::fs::write(&pkcs8, leaf_key.serialize_pem()).unwrap();
    let password = random_hex();
    run_ok(
        "cosign import-key-pair",
        cosign(reg, dir)
            .current_dir(dir)
            .env("COSIGN_PASSWORD", &password)
            .args(["import-key-pair", "--yes", "--key"])
            .arg(&pkcs8),
    );
    let key = Key {
        private: dir.join("import-cosign.key"),
        public: dir.join("import-cosign.pub"),
        public_pem: std::fs::read_to_string(dir.join("import-cosign.pub")).unwrap(),
        password,
    };
    (key, cert_path, chain_path)
}

fn keyless_policy(ca: &TestCa, identity: &str, formats: &str, tlog: &str) -> CompiledPolicy {
    let doc = format!(
        "apiVersion: {API_VERSION}\nkind: {KIND}\nsignatures:\n  formats: {formats}\nauthorities:\n  - name: ci\n    keyless:\n      identities:\n        - {identity}\n    trustedRoot: '{}'\n{tlog}",
        ca.trusted_root
    );
    CompiledPolicy::parse(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}

#[tokio::test]
async fn keyless_signatures_under_a_test_trusted_root_match_exact_and_regex_identities() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let ca = test_ca();
    let (key, cert, chain) = keyless_signer(
        &reg,
        &work.path().join("ci"),
        &ca,
        SUBJECT,
        ISSUER,
        valid_now(),
    );
    let optional = "    transparencyLog: optional\n";
    for (host, format, formats) in [
        (&reg.host, Format::Legacy, "[legacy]"),
        (&reg.referrers_host, Format::Bundle, "[bundle]"),
    ] {
        let repository = format!("ptah-conformance/{}", unique("keyless"));
        let digest = push_schema(host, &repository, "v1", b"schema \"public\" {}\n").await;
        sign(
            &reg,
            work.path(),
            &key,
            &format!("{host}/{repository}@{digest}"),
            format,
            Some((&cert, &chain)),
        );
        let src = source(host, &repository, "v1");

        // The matching issuer and subject: accepted, the identity recorded.
        let exact = keyless_policy(
            &ca,
            &format!("{{issuer: '{ISSUER}', subject: '{SUBJECT}'}}"),
            formats,
            optional,
        );
        let evidence = verified(&src, &digest, &exact).await;
        let signer = &evidence.signatures[0];
        match &signer.signer {
            Signer::Identity {
                issuer,
                subject,
                certificate_fingerprint,
            } => {
                assert_eq!(issuer, ISSUER);
                assert_eq!(subject, SUBJECT);
                let pem = std::fs::read_to_string(&cert).unwrap();
                let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
                let der = base64::engine::general_purpose::STANDARD
                    .decode(body)
                    .unwrap();
                assert_eq!(certificate_fingerprint, &sha256(&der));
            }
            other => panic!("a keyless signer, not {other:?}"),
        }
        assert_eq!(
            signer.trust_root_digest,
            Some(sha256(ca.trusted_root.as_bytes()))
        );

        // Another subject: refused, the identity named.
        let another = keyless_policy(
            &ca,
            &format!(
                "{{issuer: '{ISSUER}', subject: 'https://ci.example/acme/other/.github/workflows/release.yml@refs/heads/main'}}"
            ),
            formats,
            optional,
        );
        let refusal = refused(&src, &digest, &another).await;
        assert_eq!(refusal.rule, "authorities[ci]");
        assert!(refusal.reason.contains("matches none"), "{refusal}");

        // Regex identities (ours: sigstore-rs matches URIs only exactly).
        let regex = keyless_policy(
            &ca,
            r"{issuerRegExp: 'https://token\.ci\.example', subjectRegExp: 'https://ci\.example/acme/schemas/\.github/workflows/.*@refs/heads/main'}",
            formats,
            optional,
        );
        verified(&src, &digest, &regex).await;
        let regex_other = keyless_policy(
            &ca,
            r"{issuerRegExp: '.*', subjectRegExp: 'https://ci\.example/acme/other/.*'}",
            formats,
            optional,
        );
        let refusal = refused(&src, &digest, &regex_other).await;
        assert!(refusal.reason.contains("matches none"), "{refusal}");
        // The regex is anchored: a match inside the subject is not enough.
        let unanchored = keyless_policy(
            &ca,
            r"{issuer: 'https://token.ci.example', subjectRegExp: 'acme/schemas'}",
            formats,
            optional,
        );
        refused(&src, &digest, &unanchored).await;

        // Another trusted root (another CA): the chain does not verify.
        let stranger = test_ca();
        let refusal = refused(
            &src,
            &digest,
            &keyless_policy(
                &stranger,
                &format!("{{issuer: '{ISSUER}', subject: '{SUBJECT}'}}"),
                formats,
                optional,
            ),
        )
        .await;
        assert!(refusal.reason.contains("chain"), "{refusal}");

        // Keyless requires a transparency-log entry unless told otherwise;
        // this offline signature has none.
        let default_tlog = keyless_policy(
            &ca,
            &format!("{{issuer: '{ISSUER}', subject: '{SUBJECT}'}}"),
            formats,
            "",
        );
        let refusal = refused(&src, &digest, &default_tlog).await;
        assert!(
            refusal.reason.contains("transparency-log entry"),
            "{refusal}"
        );
    }

    // An email subject.
    let (mail_key, mail_cert, mail_chain) = keyless_signer(
        &reg,
        &work.path().join("mail"),
        &ca,
        "release@acme.example",
        "https://accounts.example",
        valid_now(),
    );
    let repository = format!("ptah-conformance/{}", unique("keyless-mail"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    sign(
        &reg,
        work.path(),
        &mail_key,
        &format!("{}/{repository}@{digest}", reg.host),
        Format::Legacy,
        Some((&mail_cert, &mail_chain)),
    );
    let src = source(&reg.host, &repository, "v1");
    verified(
        &src,
        &digest,
        &keyless_policy(
            &ca,
            r"{issuer: 'https://accounts.example', subjectRegExp: '.*@acme\.example'}",
            "[legacy]",
            "    transparencyLog: optional\n",
        ),
    )
    .await;
}

#[tokio::test]
async fn a_policy_requiring_a_transparency_log_refuses_a_signature_without_one() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    let ca = test_ca();
    let repository = format!("ptah-conformance/{}", unique("tlog"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    sign(
        &reg,
        work.path(),
        &key,
        &format!("{}/{repository}@{digest}", reg.host),
        Format::Legacy,
        None,
    );
    let src = source(&reg.host, &repository, "v1");
    // The same key verifies when the log is optional...
    verified(&src, &digest, &key_policy("release", &key, "[legacy]", "")).await;
    // ...and is refused when the policy requires a log entry.
    let extra = format!(
        "    transparencyLog: required\n    trustedRoot: '{}'\n",
        ca.trusted_root
    );
    let refusal = refused(
        &src,
        &digest,
        &key_policy("release", &key, "[legacy]", &extra),
    )
    .await;
    assert_eq!(refusal.rule, "authorities[release]");
    assert!(
        refusal.reason.contains("transparencyLog is required")
            && refusal.reason.contains("no transparency-log entry"),
        "{refusal}"
    );
}

#[tokio::test]
async fn credentials_never_appear_in_errors_or_debug_output() {
    let reg = registry().await;
    let password = format!("pw-{}", random_hex());
    let token = format!("tk-{}", random_hex());
    for credentials in [
        Credentials::Basic {
            username: "robot".into(),
            password: password.clone(),
        },
        Credentials::Bearer {
            token: token.clone(),
        },
    ] {
        let src = OciSource::new(
            format!(
                "oci://{}/ptah-conformance/{}:v1",
                reg.host,
                unique("nothing")
            )
            .parse()
            .unwrap(),
            credentials,
            &Transport {
                plain_http: true,
                ca_pem: None,
            },
            Limits::default(),
        )
        .unwrap();
        let err = src.resolve(ArtifactKind::Schema).await.unwrap_err();
        let shown = format!("{err} {err:?} {src:?}");
        assert!(
            !shown.contains(&password) && !shown.contains(&token),
            "{shown}"
        );
        // A registry that is not there: the connection error shows no secret.
        let unreachable = OciSource::new(
            "oci://127.0.0.1:9/ptah/none:v1".parse().unwrap(),
            Credentials::Basic {
                username: "robot".into(),
                password: password.clone(),
            },
            &Transport {
                plain_http: true,
                ca_pem: None,
            },
            Limits::default(),
        )
        .unwrap();
        let err = unreachable.resolve(ArtifactKind::Schema).await.unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(&password), "{shown}");
    }
    // A verification refusal through a source holding credentials.
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    let repository = format!("ptah-conformance/{}", unique("credentials"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    let with_password = OciSource::new(
        format!("oci://{}/{repository}:v1", reg.host)
            .parse()
            .unwrap(),
        Credentials::Basic {
            username: "robot".into(),
            password: password.clone(),
        },
        &Transport {
            plain_http: true,
            ca_pem: None,
        },
        Limits::default(),
    )
    .unwrap();
    let refusal = verify(
        &with_password,
        &digest,
        ArtifactKind::Schema,
        &key_policy("release", &key, "[bundle, legacy]", ""),
    )
    .await
    .unwrap_err();
    let shown = format!("{refusal} {refusal:?} {with_password:?}");
    assert!(!shown.contains(&password), "{shown}");

    // A reference with userinfo is refused without echoing it.
    let err = format!("oci://robot:{password}@{}/ptah/a:v1", reg.host)
        .parse::<OciReference>()
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains(&password) && err.contains("credentials"),
        "{err}"
    );
    // A Docker config.json with the password: parsed, never shown.
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("robot:{password}"));
    let config = format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, reg.host);
    let credentials = Credentials::from_docker_config(config.as_bytes(), &reg.host).unwrap();
    assert!(matches!(credentials, Credentials::Basic { .. }));
    assert!(!format!("{credentials:?}").contains(&password));
    let broken = format!(r#"{{"auths":{{"{}":{{"auth":"{auth}""#, reg.host);
    let err = Credentials::from_docker_config(broken.as_bytes(), &reg.host)
        .unwrap_err()
        .to_string();
    assert!(!err.contains(&password) && !err.contains(&auth), "{err}");
}

/// A test Rekor log: its key signs Signed Entry Timestamps the way Rekor
/// does (ECDSA P-256 over the canonical JSON of the entry's payload).
struct TestRekor {
    key: rcgen::KeyPair,
}

impl TestRekor {
    fn new() -> TestRekor {
        TestRekor {
            key: rcgen::KeyPair::generate().unwrap(),
        }
    }

    fn spki(&self) -> Vec<u8> {
        rcgen::PublicKeyData::subject_public_key_info(&self.key)
    }

    /// The legacy cosign Rekor bundle of a hashedrekord entry for
    /// `signature` (base64, as cosign writes it) over `payload`.
    fn bundle(
        &self,
        payload: &[u8],
        signature_b64: &str,
        public_pem: &str,
        integrated_time: i64,
    ) -> String {
        use rcgen::SigningKey;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let body = serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hex::encode(sha256_bytes(payload))}},
                "signature": {"content": signature_b64, "publicKey": {"content": b64(public_pem.as_bytes())}},
            },
        });
        // serde_json's map is sorted and compact: the canonical JSON (RFC
        // 8785) of a document of strings and integers.
        let entry = serde_json::json!({
            "body": b64(body.to_string().as_bytes()),
            "integratedTime": integrated_time,
            "logIndex": 1,
            "logID": hex::encode(sha256_bytes(&self.spki())),
        });
        let set = self.key.sign(entry.to_string().as_bytes()).unwrap();
        // The form `cosign attach signature --rekor-response` reads (its
        // LocalSignedPayload, as `sign-blob --bundle` wrote it in cosign v2).
        serde_json::json!({
            "base64Signature": signature_b64,
            "rekorBundle": {"SignedEntryTimestamp": b64(&set), "Payload": entry},
        })
        .to_string()
    }
}

/// cosign's simple-signing payload for `digest` of `repository`.
fn simple_signing_payload(docker_reference: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap()
}

/// `cosign sign-blob` of `payload` with `key`, offline: the base64 signature.
fn sign_blob(reg: &Registry, work: &Path, key: &Key, payload: &Path) -> String {
    let out_path = payload.with_extension("sig");
    run_ok(
        "cosign sign-blob",
        cosign(reg, work)
            .env("COSIGN_PASSWORD", &key.password)
            .args([
                "sign-blob",
                "--yes",
                "--use-signing-config=false",
                "--tlog-upload=false",
            ])
            .args(["--new-bundle-format=false", "--output-signature"])
            .arg(&out_path)
            .arg("--key")
            .arg(&key.private)
            .arg(payload),
    );
    std::fs::read_to_string(out_path)
        .unwrap()
        .trim()
        .to_string()
}

/// `cosign attach signature` of a payload, its signature and a Rekor bundle
/// to `reference` (the legacy `.sig` tag).
fn attach(
    reg: &Registry,
    work: &Path,
    reference: &str,
    payload: &Path,
    signature: &str,
    rekor: &str,
    certificate: Option<(&Path, &Path)>,
) {
    let sig_path = payload.with_extension("attach.sig");
    let rekor_path = payload.with_extension("rekor.json");
    std::fs::write(&sig_path, signature).unwrap();
    std::fs::write(&rekor_path, rekor).unwrap();
    let mut cmd = cosign(reg, work);
    cmd.args(["attach", "signature", "--allow-http-registry", "--payload"])
        .arg(payload)
        .arg("--signature")
        .arg(&sig_path)
        .arg("--rekor-response")
        .arg(&rekor_path);
    if let Some((cert, chain)) = certificate {
        cmd.arg("--certificate")
            .arg(cert)
            .arg("--certificate-chain")
            .arg(chain);
    }
    run_ok("cosign attach signature", cmd.arg(reference));
}

#[tokio::test]
async fn a_transparency_log_entry_is_verified_against_the_trusted_roots_rekor_key() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let key = key_pair(&reg, &work.path().join("signer"));
    let ca = test_ca();
    let rekor = TestRekor::new();
    let trusted_root = trusted_root_json(ca.root.der(), Some(&rekor.spki()));
    let policy = |root: &str| {
        key_policy(
            "release",
            &key,
            "[legacy]",
            &format!("    transparencyLog: required\n    trustedRoot: '{root}'\n"),
        )
    };

    // A signature by cosign, logged in the test Rekor, attached by cosign.
    let repository = format!("ptah-conformance/{}", unique("tlog-ok"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    let payload = simple_signing_payload(&format!("{}/{repository}", reg.host), &digest);
    let payload_path = work.path().join("payload.json");
    std::fs::write(&payload_path, &payload).unwrap();
    let signature = sign_blob(&reg, work.path(), &key, &payload_path);
    let pinned = format!("{}/{repository}@{digest}", reg.host);
    attach(
        &reg,
        work.path(),
        &pinned,
        &payload_path,
        &signature,
        &rekor.bundle(
            &payload,
            &signature,
            &key.public_pem,
            jiff::Timestamp::now().as_second(),
        ),
        None,
    );
    let src = source(&reg.host, &repository, "v1");
    let evidence = verified(&src, &digest, &policy(&trusted_root)).await;
    assert!(evidence.signatures[0].transparency_log);
    assert_eq!(
        evidence.signatures[0].trust_root_digest,
        Some(sha256(trusted_root.as_bytes()))
    );

    // Another log's key in the trusted root: the SET does not verify.
    let other_root = trusted_root_json(ca.root.der(), Some(&TestRekor::new().spki()));
    let refusal = refused(&src, &digest, &policy(&other_root)).await;
    assert_eq!(refusal.rule, "authorities[release]");
    assert!(refusal.reason.contains("transparency log"), "{refusal}");

    // A genuine entry of the log, but about another signature, attached to
    // a second artifact's signature: refused.
    let repository = format!("ptah-conformance/{}", unique("tlog-forged"));
    let forged = push_schema(&reg.host, &repository, "v1", b"schema \"audit\" {}\n").await;
    let forged_payload = simple_signing_payload(&format!("{}/{repository}", reg.host), &forged);
    let forged_path = work.path().join("forged.json");
    std::fs::write(&forged_path, &forged_payload).unwrap();
    let forged_signature = sign_blob(&reg, work.path(), &key, &forged_path);
    attach(
        &reg,
        work.path(),
        &format!("{}/{repository}@{forged}", reg.host),
        &forged_path,
        &forged_signature,
        &rekor.bundle(
            &payload,
            &signature,
            &key.public_pem,
            jiff::Timestamp::now().as_second(),
        ),
        None,
    );
    let src = source(&reg.host, &repository, "v1");
    let refusal = refused(&src, &forged, &policy(&trusted_root)).await;
    assert!(
        refusal.reason.contains("about another signature"),
        "{refusal}"
    );
}

#[tokio::test]
async fn a_logged_keyless_signature_is_checked_at_its_integrated_time() {
    let reg = registry().await;
    let work = tempfile::tempdir().unwrap();
    let ca = test_ca();
    let rekor = TestRekor::new();
    let trusted_root = trusted_root_json(ca.root.der(), Some(&rekor.spki()));
    // A certificate valid from two hours ago to one hour ago: expired now,
    // as every Fulcio certificate is ten minutes after it was issued.
    let now = std::time::SystemTime::now();
    let hour = std::time::Duration::from_secs(3600);
    let (key, cert, chain) = keyless_signer(
        &reg,
        &work.path().join("ci"),
        &ca,
        SUBJECT,
        ISSUER,
        (now - 2 * hour)..(now - hour),
    );
    let repository = format!("ptah-conformance/{}", unique("tlog-keyless"));
    let digest = push_schema(&reg.host, &repository, "v1", b"schema \"public\" {}\n").await;
    let payload = simple_signing_payload(&format!("{}/{repository}", reg.host), &digest);
    let payload_path = work.path().join("payload.json");
    std::fs::write(&payload_path, &payload).unwrap();
    let signature = sign_blob(&reg, work.path(), &key, &payload_path);
    // Logged 90 minutes ago, while the certificate was valid.
    let logged_at = jiff::Timestamp::now().as_second() - 90 * 60;
    let cert_pem = std::fs::read_to_string(&cert).unwrap();
    attach(
        &reg,
        work.path(),
        &format!("{}/{repository}@{digest}", reg.host),
        &payload_path,
        &signature,
        &rekor.bundle(&payload, &signature, &cert_pem, logged_at),
        Some((&cert, &chain)),
    );
    let src = source(&reg.host, &repository, "v1");
    let identity = format!("{{issuer: '{ISSUER}', subject: '{SUBJECT}'}}");
    let escaped = trusted_root.replace('\'', "''");

    // The log is required (the keyless default): the chain is checked at
    // the verified integrated time, and the signature is accepted.
    let logged = keyless_policy_with_root(&escaped, &identity, "[legacy]", "");
    let evidence = verified(&src, &digest, &logged).await;
    assert!(evidence.signatures[0].transparency_log);
    assert!(matches!(
        &evidence.signatures[0].signer,
        Signer::Identity { subject, .. } if subject == SUBJECT
    ));

    // Without the log there is no trusted signing time: checked now, the
    // expired certificate is refused.
    let unlogged = keyless_policy_with_root(
        &escaped,
        &identity,
        "[legacy]",
        "    transparencyLog: optional\n",
    );
    let refusal = refused(&src, &digest, &unlogged).await;
    assert!(refusal.reason.contains("chain"), "{refusal}");
}

fn keyless_policy_with_root(
    root: &str,
    identity: &str,
    formats: &str,
    tlog: &str,
) -> CompiledPolicy {
    let doc = format!(
        "apiVersion: {API_VERSION}\nkind: {KIND}\nsignatures:\n  formats: {formats}\nauthorities:\n  - name: ci\n    keyless:\n      identities:\n        - {identity}\n    trustedRoot: '{root}'\n{tlog}"
    );
    CompiledPolicy::parse(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}
