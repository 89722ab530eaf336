//! The harness's OCI registries with the real pinned Ptah CLI and cosign: a
//! schema artifact pushed by `ptah schema push`, a keyed cosign signature
//! of it (cosign v3 stores a sigstore bundle as an OCI 1.1 referrer), and how
//! the signature is found again: through the referrers tag schema on
//! distribution v3, which has no referrers API, and through the OCI 1.1
//! referrers API on the harness's own `oci-registry`, which serves it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Output;

use conformance::testkit::oci::{
    self, ARTIFACT_SOURCE, EMPTY_CONFIG_TYPE, Key, OCI_MANIFEST, Registry, random_hex, run_ok,
    sha256, sign_command, verify_command,
};
use conformance::testkit::unique;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

// The Ptah CLI's schema artifact (see the CLI reference, §4).
const SCHEMA_ARTIFACT_TYPE: &str = "application/vnd.stokaro.ptah.schema.v1";
const SCHEMA_LAYER_TYPE: &str = "application/vnd.stokaro.ptah.schema.hcl.v1";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
// What cosign v3 stores by default: a sigstore bundle, attached as a referrer.
const SIGSTORE_BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

async fn registry() -> Registry {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    Registry::from_harness(harness).unwrap()
}

fn client() -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        // An artifact, never a platform image: no index resolution.
        platform_resolver: None,
        ..Default::default()
    })
}

/// The Ptah version `ptah schema push` stamps: the pinned one.
fn pinned_ptah_version() -> String {
    let pins = conformance::tools::workspace_root().join("conformance/tools/pins.env");
    std::fs::read_to_string(pins)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PTAH_VERSION="))
        .expect("PTAH_VERSION in pins.env")
        .trim()
        .to_string()
}

/// `ptah schema push` of `schema.hcl` to `reference`; returns the manifest
/// digest.
async fn push_schema_artifact(reference: &Reference, schema: &[u8]) -> String {
    oci::push_schema(&reference.whole(), schema)
        .await
        .expect("ptah schema push")
        .digest
}

/// Makes a cosign key pair in `dir` with a random password.
fn key_pair(reg: &Registry, dir: &Path) -> Key {
    oci::key_pair(&reg.cosign, dir, &random_hex()).unwrap()
}

/// Signs `reference` with a new key pair made in `<work>/signer`: a keyed
/// signature (cosign v3's sigstore bundle), offline. Returns the public key.
fn sign(reg: &Registry, work: &Path, reference: &str) -> PathBuf {
    let key = key_pair(reg, &work.join("signer"));
    run_ok(
        "cosign sign",
        &mut sign_command(&reg.cosign, work, &key, reference, false, None),
    )
    .unwrap();
    key.public
}

/// `cosign verify` of `reference` with `public`, offline.
fn verify(reg: &Registry, work: &Path, public: &Path, reference: &str) -> Output {
    verify_command(&reg.cosign, work, public, reference)
        .output()
        .expect("cosign runs")
}

/// The JSON body and status of a plain GET on the registry.
fn get_json(url: &str, accept: &str) -> (u16, String, String) {
    let host_port = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let path = url
        .trim_start_matches("http://")
        .trim_start_matches(&host_port)
        .to_string();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host_port}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    let mut stream = std::net::TcpStream::connect(&host_port).unwrap();
    std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    (status, head.to_string(), body.to_string())
}

#[tokio::test]
async fn a_keyed_cosign_signature_of_a_schema_artifact_is_found_as_a_referrer_and_verifies() {
    let reg = registry().await;
    let client = client();
    let repository = format!("ptah-conformance/{}", unique("schema"));
    let tagged: Reference = format!("{}/{repository}:v1", reg.host).parse().unwrap();
    let schema =
        b"schema \"public\" {}\ntable \"public\" \"t\" {\n  column \"id\" { type = bigint }\n}\n";
    let digest = push_schema_artifact(&tagged, schema).await;
    let pinned: Reference = format!("{}/{repository}@{digest}", reg.host)
        .parse()
        .unwrap();

    // The artifact reads back as the CLI shapes it: OCI 1.1 with
    // artifactType, the empty config, one `schema.hcl` layer, the kind,
    // format and provenance annotations.
    let (manifest, _) = client
        .pull_manifest(&pinned, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let OciManifest::Image(manifest) = manifest else {
        panic!("an image manifest");
    };
    assert_eq!(
        manifest.artifact_type.as_deref(),
        Some(SCHEMA_ARTIFACT_TYPE)
    );
    assert_eq!(manifest.config.media_type, EMPTY_CONFIG_TYPE);
    assert_eq!(manifest.layers.len(), 1);
    assert_eq!(manifest.layers[0].media_type, SCHEMA_LAYER_TYPE);
    assert_eq!(
        manifest.layers[0]
            .annotations
            .as_ref()
            .and_then(|a| a.get("org.opencontainers.image.title"))
            .map(String::as_str),
        Some("schema.hcl")
    );
    let annotations = manifest.annotations.clone().unwrap_or_default();
    let annotation = |k: &str| annotations.get(k).map(String::as_str);
    assert_eq!(
        annotation("io.stokaro.ptah.kind"),
        Some(SCHEMA_ARTIFACT_TYPE)
    );
    assert_eq!(annotation("io.stokaro.ptah.schema-format"), Some("hcl"));
    assert_eq!(
        annotation("io.stokaro.ptah.version"),
        Some(pinned_ptah_version().as_str())
    );
    assert_eq!(
        annotation("org.opencontainers.image.source"),
        Some(ARTIFACT_SOURCE)
    );
    assert!(
        annotation("org.opencontainers.image.created").is_some(),
        "{annotations:?}"
    );

    // Sign with the pinned cosign.
    let work = tempfile::tempdir().unwrap();
    let public = sign(&reg, work.path(), &pinned.whole());

    // distribution v3 has no referrers API, so cosign kept the signature in
    // an index tagged by the referrers tag schema (`sha256-<hex>`).
    let (status, head, _) = get_json(
        &format!("http://{}/v2/{repository}/referrers/{digest}", reg.host),
        OCI_INDEX,
    );
    assert_eq!(status, 404, "{head}");
    let tags = client
        .list_tags(&tagged, &RegistryAuth::Anonymous, None, None)
        .await
        .unwrap();
    assert!(tags.tags.contains(&digest.replace(':', "-")), "{tags:?}");

    // The signature is a referrer of the artifact: a manifest whose subject
    // is the artifact and whose artifactType is the sigstore bundle. The
    // client asks the referrers API and, where the registry answers 404,
    // reads the referrers tag schema (`sha256-<hex>`).
    let referrers = client.pull_referrers(&pinned, None).await.unwrap();
    let bundle = referrers
        .manifests
        .iter()
        .find(|d| d.artifact_type.as_deref() == Some(SIGSTORE_BUNDLE_TYPE))
        .unwrap_or_else(|| panic!("a sigstore bundle among the referrers: {referrers:?}"));
    assert_eq!(bundle.media_type, OCI_MANIFEST);
    let signature: Reference = format!("{}/{repository}@{}", reg.host, bundle.digest)
        .parse()
        .unwrap();
    let (signature_manifest, _) = client
        .pull_manifest(&signature, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let OciManifest::Image(signature_manifest) = signature_manifest else {
        panic!("the signature is an image manifest");
    };
    let subject: &OciDescriptor = signature_manifest.subject.as_ref().expect("a subject");
    assert_eq!(subject.digest, digest);
    assert_eq!(
        signature_manifest.artifact_type.as_deref(),
        Some(SIGSTORE_BUNDLE_TYPE)
    );
    assert_eq!(
        signature_manifest.layers[0].media_type,
        SIGSTORE_BUNDLE_TYPE
    );

    // Verify with the signer's key: accepted, and about this digest.
    let out = verify(&reg, work.path(), &public, &pinned.whole());
    assert!(
        out.status.success(),
        "cosign verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let claims: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        claims[0]["critical"]["image"]["docker-manifest-digest"],
        serde_json::Value::String(digest.clone())
    );

    // Another key: refused.
    let other_public = key_pair(&reg, &work.path().join("other")).public;
    let out = verify(&reg, work.path(), &other_public, &pinned.whole());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no matching"), "{stderr}");
}

/// A header of a response head, by name in any case.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// An artifact type in a query string: `+` would read as a space.
fn query_value(artifact_type: &str) -> String {
    artifact_type.replace('+', "%2B")
}

/// What `GET /v2/<repo>/referrers/<digest>[?artifactType=]` answers.
struct Referrers {
    manifests: Vec<serde_json::Value>,
    filters_applied: Option<String>,
}

fn get_referrers(url: &str, artifact_type: Option<&str>) -> Referrers {
    let url = match artifact_type {
        Some(t) => format!("{url}?artifactType={}", query_value(t)),
        None => url.to_string(),
    };
    let (status, head, body) = get_json(&url, OCI_INDEX);
    assert_eq!(status, 200, "GET {url}\n{head}\n{body}");
    assert_eq!(header(&head, "Content-Type").as_deref(), Some(OCI_INDEX));
    let index: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(index["schemaVersion"], 2, "{body}");
    assert_eq!(index["mediaType"], OCI_INDEX, "{body}");
    Referrers {
        manifests: index["manifests"].as_array().expect("manifests").clone(),
        filters_applied: header(&head, "OCI-Filters-Applied"),
    }
}

fn digests(referrers: &Referrers) -> Vec<&str> {
    referrers
        .manifests
        .iter()
        .map(|d| d["digest"].as_str().expect("a digest"))
        .collect()
}

// A referrer of another kind than a signature, for the filter to leave out.
const NOTE_ARTIFACT_TYPE: &str = "application/vnd.stokaro.ptah.conformance.note.v1";

/// Pushes, by digest, an artifact with no content of its own whose subject
/// is `subject` (an image manifest of `subject_size` bytes). The empty
/// config blob is already in the repository. Returns its digest.
async fn push_note(
    client: &Client,
    repository: &str,
    host: &str,
    subject: &str,
    subject_size: usize,
) -> String {
    let empty = serde_json::json!({
        "mediaType": EMPTY_CONFIG_TYPE,
        "digest": sha256(b"{}"),
        "size": 2,
        "data": "e30=",
    });
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": NOTE_ARTIFACT_TYPE,
        "config": empty,
        "layers": [empty],
        "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": subject_size},
        "annotations": {"org.opencontainers.image.created": jiff::Timestamp::now().to_string()},
    });
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let digest = sha256(&bytes);
    let reference: Reference = format!("{host}/{repository}@{digest}").parse().unwrap();
    client
        .push_manifest_raw(
            &reference,
            bytes,
            http::HeaderValue::from_static(OCI_MANIFEST),
        )
        .await
        .expect("push the note");
    digest
}

/// OCI 1.1 content discovery on `oci-registry`: `GET
/// /v2/<repo>/referrers/<digest>` answers an image index of the manifests
/// whose subject is the artifact, each described with its own
/// artifactType, and `?artifactType=` narrows it and says so in
/// `OCI-Filters-Applied`. cosign keeps its signature there (no fallback
/// tag) and verifies it read back through the API.
#[tokio::test]
async fn the_referrers_registry_lists_a_cosign_signature_by_artifact_type_and_it_verifies() {
    let reg = registry().await;
    let host = &reg.referrers_host;
    let client = client();
    let repository = format!("ptah-conformance/{}", unique("referrers"));
    let tagged: Reference = format!("{host}/{repository}:v1").parse().unwrap();
    let digest = push_schema_artifact(&tagged, b"schema \"public\" {}\n").await;
    let pinned = format!("{host}/{repository}@{digest}");
    let manifest_url = |digest: &str| format!("http://{host}/v2/{repository}/manifests/{digest}");
    let (status, _, artifact) = get_json(&manifest_url(&digest), OCI_MANIFEST);
    assert_eq!(status, 200, "{artifact}");
    assert_eq!(sha256(artifact.as_bytes()), digest);

    let work = tempfile::tempdir().unwrap();
    let public = sign(&reg, work.path(), &pinned);
    let note = push_note(&client, &repository, host, &digest, artifact.len()).await;

    // Unfiltered: both referrers, each with its artifactType.
    let url = format!("http://{host}/v2/{repository}/referrers/{digest}");
    let all = get_referrers(&url, None);
    assert_eq!(all.filters_applied, None);
    assert_eq!(all.manifests.len(), 2, "{:?}", all.manifests);
    let bundle = all
        .manifests
        .iter()
        .find(|d| d["artifactType"] == SIGSTORE_BUNDLE_TYPE)
        .unwrap_or_else(|| panic!("a sigstore bundle among {:?}", all.manifests));
    assert_eq!(bundle["mediaType"], OCI_MANIFEST);
    let bundle_digest = bundle["digest"].as_str().unwrap().to_string();
    let note_descriptor = all
        .manifests
        .iter()
        .find(|d| d["digest"] == note.as_str())
        .unwrap_or_else(|| panic!("the note among {:?}", all.manifests));
    assert_eq!(note_descriptor["artifactType"], NOTE_ARTIFACT_TYPE);
    assert_eq!(note_descriptor["mediaType"], OCI_MANIFEST);

    // The descriptor names the signature manifest exactly: its bytes, its
    // size, and in it the subject and artifactType.
    let (status, _, signature) = get_json(&manifest_url(&bundle_digest), OCI_MANIFEST);
    assert_eq!(status, 200, "{signature}");
    assert_eq!(sha256(signature.as_bytes()), bundle_digest);
    assert_eq!(bundle["size"], signature.len());
    let signature: serde_json::Value = serde_json::from_str(&signature).unwrap();
    assert_eq!(signature["subject"]["digest"], digest.as_str());
    assert_eq!(signature["artifactType"], SIGSTORE_BUNDLE_TYPE);
    assert_eq!(signature["layers"][0]["mediaType"], SIGSTORE_BUNDLE_TYPE);
    // ... and carries the manifest's annotations, as OCI 1.1 asks.
    assert_eq!(bundle["annotations"], signature["annotations"]);
    assert_eq!(
        bundle["annotations"]["dev.sigstore.bundle.predicateType"],
        "https://sigstore.dev/cosign/sign/v1"
    );

    // Filtered by artifactType: only the matching referrer, and the header
    // that says the registry applied the filter.
    let bundles = get_referrers(&url, Some(SIGSTORE_BUNDLE_TYPE));
    assert_eq!(bundles.filters_applied.as_deref(), Some("artifactType"));
    assert_eq!(digests(&bundles), [bundle_digest.as_str()]);
    let notes = get_referrers(&url, Some(NOTE_ARTIFACT_TYPE));
    assert_eq!(notes.filters_applied.as_deref(), Some("artifactType"));
    assert_eq!(digests(&notes), [note.as_str()]);
    let none = get_referrers(&url, Some("application/vnd.stokaro.ptah.absent.v1"));
    assert_eq!(none.filters_applied.as_deref(), Some("artifactType"));
    assert!(none.manifests.is_empty(), "{:?}", none.manifests);
    // A digest nothing refers to: an empty index, not an error.
    let unreferenced = sha256(b"nothing refers to this");
    let empty = get_referrers(
        &format!("http://{host}/v2/{repository}/referrers/{unreferenced}"),
        None,
    );
    assert!(empty.manifests.is_empty(), "{:?}", empty.manifests);

    // cosign saw the registry take the subject (`OCI-Subject`) and kept no
    // index under the referrers tag schema.
    let tags = client
        .list_tags(&tagged, &RegistryAuth::Anonymous, None, None)
        .await
        .unwrap();
    assert_eq!(tags.tags, ["v1"]);

    // oci-client asks the API with the filter and gets the signature.
    let pinned_ref: Reference = pinned.parse().unwrap();
    let found = client
        .pull_referrers(&pinned_ref, Some(SIGSTORE_BUNDLE_TYPE))
        .await
        .unwrap();
    assert_eq!(
        found
            .manifests
            .iter()
            .map(|d| d.digest.as_str())
            .collect::<Vec<_>>(),
        [bundle_digest.as_str()]
    );

    // cosign verify finds the bundle through the API and accepts it.
    let out = verify(&reg, work.path(), &public, &pinned);
    assert!(
        out.status.success(),
        "cosign verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let claims: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        claims[0]["critical"]["image"]["docker-manifest-digest"],
        serde_json::Value::String(digest.clone())
    );
}
