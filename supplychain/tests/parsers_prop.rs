//! Bad input at volume (issue 26): property tests over every parser of
//! outside data in the supply chain. Nothing panics, every refusal names the
//! field, line or rule it is about, and what a parser accepts reads back as
//! what was written.
//!
//! | Test | Parser | Outside data |
//! | --- | --- | --- |
//! | `snapshot_manifest_*` | [`Manifest::parse`], [`manifest::verify`] | snapshot manifest |
//! | `snapshot_*` | [`snapshot::take`] (keys of a source ConfigMap), [`snapshot::check_files`] (a mounted snapshot) | snapshot manifest |
//! | `oci_manifest_*` | [`oci::read_manifest`], [`oci::check_artifact`] | OCI manifest |
//! | `oci_reference_*`, `docker_config_*` | [`OciReference`]'s `FromStr`, [`Credentials::from_docker_config`] | OCI manifest (the reference and credentials that reach it) |
//! | `referrers_*` | the referrers index (oci-client's `OciImageIndex`), [`oci::read_manifest`] and [`oci::check_referrer`] of each referrer | referrers |
//! | `git_advertisement_*` | gix's protocol v1 handshake and ref lines, [`Advertisement::from_handshake`] | Git advertisement |
//! | `flux_artifact_*` | [`flux::files_at`] (gzip, tar, entry names) | Flux artifact |
//!
//! The DSSE bundle a referrer carries is read by a private parser; its
//! property test is in `src/verification/mod.rs`.
//!
//! Case counts are modest so the file runs in seconds in a debug build, and
//! no failure is persisted into the source tree (`failure_persistence`).

use std::collections::BTreeMap;

use gix::protocol::handshake::refs::from_v1_refs_received_as_part_of_handshake_and_capabilities;
use gix::protocol::transport::client::capabilities::blocking_recv::Handshake;
use gix::protocol::transport::packetline::PacketLineRef;
use gix::protocol::transport::packetline::blocking_io::StreamingPeekableIter;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use supplychain::flux::{self, FluxError};
use supplychain::git::{AdvertisedRef, Advertisement, ByIdPermission};
use supplychain::manifest::{self, Limits, Manifest, ParseError};
use supplychain::oci::{
    self, ArtifactKind, Credentials, OCI_EMPTY_CONFIG, OCI_MANIFEST, OciError, OciReference,
    TITLE_ANNOTATION,
};
use supplychain::sha256_digest;
use supplychain::snapshot::{self, CheckError, MANIFEST_KEY, SnapshotError, SourceConfigMap};

#[path = "support/json_mutation.rs"]
mod json_mutation;
use json_mutation::*;

// ---- snapshot manifest ----

/// A canonical path: 1–3 components of safe characters (spaces included).
fn path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-zA-Z0-9_][a-zA-Z0-9_. -]{0,11}", 1..4).prop_map(|c| c.join("/"))
}

fn file_set() -> impl Strategy<Value = BTreeMap<String, Vec<u8>>> {
    prop::collection::btree_map(path(), prop::collection::vec(any::<u8>(), 0..48), 0..8).prop_map(
        |mut files| {
            // `a` and `a/b` cannot both be files: keep the deeper one.
            let names: Vec<String> = files.keys().cloned().collect();
            for n in &names {
                if names.iter().any(|m| m.starts_with(&format!("{n}/"))) {
                    files.remove(n);
                }
            }
            files
        },
    )
}

fn small_limits() -> Limits {
    Limits {
        max_files: 4,
        max_total_bytes: 1024,
    }
}

/// A parse refusal says where (the line) or which rule (header, final
/// newline, UTF-8, size).
fn check_parse_error(e: &ParseError, lines: usize) -> Result<(), TestCaseError> {
    let text = e.to_string();
    prop_assert!(text.starts_with("manifest "), "{text}");
    match e {
        ParseError::Line { line, reason } => {
            prop_assert!(*line >= 2 && *line <= lines.max(2), "{text}");
            prop_assert!(!reason.is_empty(), "{text}");
        }
        ParseError::Entries { line, .. } => {
            prop_assert!(*line >= 2 && *line <= lines.max(2), "{text}")
        }
        ParseError::Header
        | ParseError::NoFinalNewline
        | ParseError::NotUtf8 { .. }
        | ParseError::Oversized { .. } => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn snapshot_manifest_parse_of_any_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        for limits in [Limits::default(), small_limits()] {
            match Manifest::parse(&bytes, &limits) {
                // One spelling per file set: what parses re-encodes to the input.
                Ok(m) => prop_assert_eq!(m.to_bytes(), bytes.clone()),
                Err(e) => check_parse_error(&e, bytes.split(|b| *b == b'\n').count())?,
            }
        }
    }

    #[test]
    fn snapshot_manifest_lines_near_the_format_are_refused_by_line_and_rule(
        lines in prop::collection::vec(
            (
                prop_oneof!["[0-9a-f]{64}", "[0-9a-fA-F]{0,66}", ".{0,8}"],
                prop_oneof!["0|[1-9][0-9]{0,6}", "[0-9+-]{0,4}", ".{0,3}"],
                prop_oneof![path(), ".{0,12}", Just(String::new())],
                prop_oneof![Just(" "), Just("  "), Just("\t"), Just("")],
            ),
            0..6,
        ),
        header in prop_oneof![Just(manifest::HEADER.to_string()), ".{0,18}"],
        newline in any::<bool>(),
    ) {
        let mut text = header;
        for (hash, size, path, sep) in &lines {
            text.push('\n');
            text.push_str(&format!("{hash}{sep}{size}{sep}{path}"));
        }
        if newline {
            text.push('\n');
        }
        match Manifest::parse(text.as_bytes(), &Limits::default()) {
            Ok(m) => prop_assert_eq!(m.to_bytes(), text.as_bytes().to_vec()),
            Err(e) => check_parse_error(&e, lines.len() + 1)?,
        }
    }

    #[test]
    fn snapshot_manifest_of_any_file_set_round_trips_and_verifies(files in file_set()) {
        let set = || files.iter().map(|(p, b)| (p.as_str(), b.as_slice()));
        let m = Manifest::from_files(set(), &Limits::default()).expect("a valid file set");
        let bytes = m.to_bytes();
        prop_assert_eq!(Manifest::parse(&bytes, &Limits::default()), Ok(m.clone()));
        let verified = manifest::verify(set(), &bytes, &m.digest(), &Limits::default());
        prop_assert_eq!(verified, Ok(m));
    }

    #[test]
    fn snapshot_manifest_with_a_changed_byte_is_refused_naming_the_line(
        files in file_set().prop_filter("a file", |f| !f.is_empty()),
        at in any::<Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let set = || files.iter().map(|(p, b)| (p.as_str(), b.as_slice()));
        let m = Manifest::from_files(set(), &Limits::default()).expect("a valid file set");
        let mut bytes = m.to_bytes();
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        match Manifest::parse(&bytes, &Limits::default()) {
            Ok(other) => {
                prop_assert_eq!(other.to_bytes(), bytes.clone());
                // Another manifest: the files no longer verify against it,
                // and the refusal names a file.
                if other != m {
                    let e = manifest::verify(set(), &bytes, &other.digest(), &Limits::default())
                        .expect_err("other files");
                    prop_assert!(e.to_string().starts_with("file "), "{e}");
                }
            }
            // A byte changed to a newline splits a line: the refusal may
            // name a line the unchanged manifest did not have.
            Err(e) => check_parse_error(&e, bytes.split(|b| *b == b'\n').count())?,
        }
    }

    #[test]
    fn snapshot_verify_names_the_file_that_differs(
        files in file_set().prop_filter("a file", |f| !f.is_empty()),
        which in any::<Index>(),
        extra in any::<u8>(),
    ) {
        let m = Manifest::from_files(
            files.iter().map(|(p, b)| (p.as_str(), b.as_slice())),
            &Limits::default(),
        )
        .expect("a valid file set");
        let name = files.keys().nth(which.index(files.len())).cloned().expect("a file");
        let mut changed = files.clone();
        changed.get_mut(&name).expect("the file").push(extra);
        let e = manifest::verify(
            changed.iter().map(|(p, b)| (p.as_str(), b.as_slice())),
            &m.to_bytes(),
            &m.digest(),
            &Limits::default(),
        )
        .expect_err("a changed file");
        prop_assert_eq!(e.path(), Some(name.as_str()), "{}", e);
    }

    #[test]
    fn snapshot_take_of_any_config_map_names_the_key_or_checks_back(
        data in prop::collection::btree_map(
            prop_oneof!["[-._a-zA-Z0-9]{1,12}", ".{0,12}"], ".{0,24}", 0..5),
        binary in prop::collection::btree_map(
            prop_oneof!["[-._a-zA-Z0-9]{1,12}", ".{0,12}"],
            prop::collection::vec(any::<u8>(), 0..24), 0..3),
        selected in prop::collection::vec(prop_oneof!["[-._a-zA-Z0-9]{1,12}", ".{0,12}"], 0..3),
        uid in prop_oneof![Just(String::new()), "[a-f0-9-]{1,36}"],
    ) {
        let source = SourceConfigMap { data, binary_data: binary };
        match snapshot::take(&source, &selected, &uid, &Limits::default()) {
            Ok(snap) => {
                // What the manager writes, the init container checks back.
                let mut mounted: BTreeMap<String, Vec<u8>> = snap
                    .data()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                mounted.extend(snap.binary_data());
                let checked = snapshot::check_files(&mounted, &snap.content_digest, &Limits::default());
                prop_assert_eq!(checked.ok(), Some(snap.manifest.clone()));
                prop_assert!(snap.name.starts_with(snapshot::NAME_PREFIX));
            }
            Err(e) => {
                let text = e.to_string();
                match &e {
                    SnapshotError::MissingKey { key }
                    | SnapshotError::KeyInBoth { key }
                    | SnapshotError::InvalidKey { key, .. } => {
                        prop_assert!(text.starts_with(&format!("key {key:?}: ")), "{text}")
                    }
                    SnapshotError::NoOwner => prop_assert!(uid.is_empty(), "{text}"),
                    SnapshotError::Manifest(_) => prop_assert!(
                        text.starts_with("file ") || text.starts_with("path "),
                        "{text}"
                    ),
                    SnapshotError::TooLarge { .. } => prop_assert!(text.contains("ConfigMap")),
                }
            }
        }
    }

    #[test]
    fn snapshot_check_of_any_mounted_files_names_the_file(
        files in prop::collection::btree_map(".{0,10}", prop::collection::vec(any::<u8>(), 0..16), 0..4),
        manifest in prop_oneof![
            Just(None),
            prop::collection::vec(any::<u8>(), 0..200).prop_map(Some),
        ],
        digest in prop_oneof![Just(None), "sha256:[0-9a-f]{64}".prop_map(Some)],
    ) {
        let mut mounted = files;
        if let Some(m) = &manifest {
            mounted.insert(MANIFEST_KEY.to_string(), m.clone());
        }
        // The digest of the manifest given, or any other.
        let expected = digest.unwrap_or_else(|| sha256_digest(manifest.as_deref().unwrap_or_default()));
        if let Err(e) = snapshot::check_files(&mounted, &expected, &Limits::default()) {
            let text = e.to_string();
            prop_assert!(
                text.starts_with("file ") || text.starts_with("manifest ") || text.starts_with("path "),
                "{text}"
            );
            if let CheckError::NoManifest = e {
                prop_assert!(manifest.is_none());
            }
        }
    }
}

/// Found by CI's run of the property above: a newline put in place of a byte
/// of the one entry line makes a third line, and the refusal names it.
#[test]
fn snapshot_manifest_with_a_newline_put_in_names_a_line_of_the_changed_text() {
    let m = Manifest::from_files([("a/aA00", &b""[..])], &Limits::default()).expect("one file");
    let original = m.to_bytes();
    let header = original
        .iter()
        .position(|b| *b == b'\n')
        .expect("a header line");
    for i in header + 1..original.len() - 1 {
        let mut bytes = original.clone();
        bytes[i] = b'\n';
        let e = Manifest::parse(&bytes, &Limits::default()).expect_err("a split line");
        let lines = bytes.split(|b| *b == b'\n').count();
        check_parse_error(&e, lines).unwrap_or_else(|f| panic!("at {i}: {f}"));
    }
}

// ---- OCI manifest ----

fn hex64() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}".prop_map(|h| format!("sha256:{h}"))
}

/// A Ptah artifact's manifest as `ptah schema push` / `ptah migrations push`
/// (or oras, in the config media type) writes it.
fn artifact_manifest() -> impl Strategy<Value = (ArtifactKind, Value)> {
    (
        prop_oneof![Just(ArtifactKind::Schema), Just(ArtifactKind::Migrations)],
        any::<bool>(),
        prop::collection::btree_set("[a-z0-9_]{1,10}\\.sql", 1..5),
        prop::collection::vec((hex64(), 0i64..1 << 40), 5),
        any::<bool>(),
    )
        .prop_map(|(kind, oras, titles, blobs, annotate)| {
            let titles: Vec<String> = match kind {
                ArtifactKind::Schema => vec!["schema.hcl".into()],
                ArtifactKind::Migrations => titles.into_iter().collect(),
                ArtifactKind::Flux => unreachable!("only Ptah's kinds are generated"),
            };
            let layers: Vec<Value> = titles
                .iter()
                .zip(&blobs)
                .map(|(title, (digest, size))| {
                    json!({
                        "mediaType": kind.layer_media_type(),
                        "digest": digest,
                        "size": size,
                        "annotations": {TITLE_ANNOTATION: title},
                    })
                })
                .collect();
            let mut doc = json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": if oras { kind.artifact_type() } else { OCI_EMPTY_CONFIG },
                    "digest": blobs[0].0,
                    "size": 2,
                },
                "layers": layers,
            });
            if !oras {
                doc["artifactType"] = json!(kind.artifact_type());
            }
            if annotate {
                doc["annotations"] = json!({oci::KIND_ANNOTATION: kind.artifact_type()});
            }
            (kind, doc)
        })
}

/// The reference and digest a registry answered `bytes` for.
fn read(bytes: &[u8]) -> Result<oci::FetchedManifest, OciError> {
    oci::read_manifest(
        "oci://registry.example/app",
        &sha256_digest(bytes),
        bytes,
        &oci::Limits::default(),
    )
}

/// The rule words `check_artifact` refuses with; each also names the field.
const ARTIFACT_RULES: &[&str] = &[
    "declares another type",
    "config media type",
    "annotation",
    "layer",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn oci_manifest_of_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(fetched) = read(&bytes) {
            for kind in [ArtifactKind::Schema, ArtifactKind::Migrations] {
                let _ = oci::check_artifact(&fetched, kind);
            }
        }
        // A digest that is not the bytes', and bounds the bytes break.
        let e = oci::read_manifest("r", "sha256:00", &bytes, &oci::Limits::default()).unwrap_err();
        prop_assert!(matches!(e, OciError::DigestMismatch { .. }), "{e}");
        let tight = oci::Limits { max_manifest_bytes: 8, ..oci::Limits::default() };
        if bytes.len() > 8 {
            let e = oci::read_manifest("r", &sha256_digest(&bytes), &bytes, &tight).unwrap_err();
            prop_assert!(matches!(e, OciError::TooLarge { .. }), "{e}");
        }
    }

    #[test]
    fn oci_manifest_of_a_ptah_artifact_reads_back_as_written((kind, doc) in artifact_manifest()) {
        let bytes = serde_json::to_vec(&doc).expect("json");
        let fetched = read(&bytes).expect("a valid manifest");
        prop_assert_eq!(serde_json::to_value(&fetched.manifest).expect("json"), doc.clone());
        let layers = oci::check_artifact(&fetched, kind).expect("the expected artifact");
        prop_assert_eq!(layers.len(), doc["layers"].as_array().map_or(0, Vec::len));
        for (layer, written) in layers.iter().zip(doc["layers"].as_array().into_iter().flatten()) {
            prop_assert_eq!(&layer.digest, &written["digest"]);
            prop_assert_eq!(&layer.title, &written["annotations"][TITLE_ANNOTATION]);
        }
        // Never the other kind.
        let other = match kind {
            ArtifactKind::Schema => ArtifactKind::Migrations,
            ArtifactKind::Migrations | ArtifactKind::Flux => ArtifactKind::Schema,
        };
        let e = oci::check_artifact(&fetched, other).unwrap_err();
        prop_assert!(matches!(e, OciError::ArtifactType { .. }), "{e}");
        // Nor a Flux artifact.
        let e = oci::check_artifact(&fetched, ArtifactKind::Flux).unwrap_err();
        prop_assert!(matches!(e, OciError::ArtifactType { .. }), "{e}");
    }

    #[test]
    fn oci_manifest_with_a_broken_field_is_refused_naming_it(
        (kind, doc) in artifact_manifest(),
        at in any::<Index>(),
        broken in mutation(),
    ) {
        let mut doc = doc;
        let keys = mutate(&mut doc, at, &broken);
        let bytes = serde_json::to_vec(&doc).expect("json");
        match read(&bytes) {
            Ok(fetched) => {
                if let Err(e) = oci::check_artifact(&fetched, kind) {
                    let text = e.to_string();
                    prop_assert!(matches!(e, OciError::ArtifactType { .. }), "{text}");
                    prop_assert!(
                        ARTIFACT_RULES.iter().any(|r| text.contains(r)),
                        "{text}"
                    );
                }
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(matches!(e, OciError::Manifest { .. }), "{text}");
                prop_assert!(names_one_of(&text, &keys), "{text} names none of {keys:?}");
            }
        }
    }

    #[test]
    fn oci_reference_of_any_text_never_panics(text in ".{0,80}", prefixed in "oci://.{0,60}") {
        for input in [&text, &prefixed] {
            match input.parse::<OciReference>() {
                Ok(r) => prop_assert!(r.tag.is_some() || r.digest.is_some()),
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(text.starts_with("OCI reference "), "{text}");
                }
            }
        }
    }

    #[test]
    fn oci_reference_that_is_valid_round_trips(
        host in "[a-z0-9]{1,10}(\\.[a-z0-9]{1,6}){0,2}(:[0-9]{1,5})?",
        repo in prop::collection::vec("[a-z0-9][a-z0-9._-]{0,8}", 1..4),
        tag in prop_oneof![Just(None), "[A-Za-z0-9_][A-Za-z0-9._-]{0,20}".prop_map(Some)],
        digest in prop_oneof![Just(None), hex64().prop_map(Some)],
    ) {
        let mut text = format!("oci://{host}/{}", repo.join("/"));
        if let Some(t) = &tag {
            text.push_str(&format!(":{t}"));
        }
        if let Some(d) = &digest {
            text.push_str(&format!("@{d}"));
        }
        let parsed: OciReference = text.parse().expect("a valid reference");
        prop_assert_eq!(&parsed.registry, &host);
        prop_assert_eq!(&parsed.digest, &digest);
        if tag.is_some() || digest.is_some() {
            prop_assert_eq!(parsed.to_string(), text);
        } else {
            prop_assert_eq!(parsed.tag.as_deref(), Some("latest"));
        }
        let again: OciReference = parsed.to_string().parse().expect("its own spelling");
        prop_assert_eq!(again, parsed);
    }

    #[test]
    fn docker_config_of_any_json_never_leaks_the_password(
        at in any::<Index>(),
        broken in mutation(),
        password in "[a-zA-Z0-9]{12,20}",
    ) {
        let auth = base64_encode(&format!("robot:{password}"));
        let mut doc = json!({"auths": {
            "registry.example": {"auth": auth},
            "https://other.example/v1/": {"username": "u", "password": password},
        }});
        mutate(&mut doc, at, &broken);
        let bytes = serde_json::to_vec(&doc).expect("json");
        for registry in ["registry.example", "other.example", "docker.io"] {
            match Credentials::from_docker_config(&bytes, registry) {
                Ok(c) => {
                    let shown = format!("{c:?}");
                    prop_assert!(!shown.contains(&password), "{}", shown);
                }
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(text.starts_with("registry credentials: "), "{text}");
                    prop_assert!(!text.contains(&password), "{text}");
                    prop_assert!(!text.contains(&auth), "{text}");
                }
            }
        }
    }
}

fn base64_encode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

// ---- referrers ----

const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

/// A referrer of `subject`: a sigstore bundle manifest naming it.
fn referrer(subject: &str, bundle: &str) -> Value {
    json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE_TYPE,
        "config": {"mediaType": OCI_EMPTY_CONFIG, "digest": bundle, "size": 2},
        "layers": [{"mediaType": BUNDLE_TYPE, "digest": bundle, "size": 1024}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": 512},
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn referrers_index_of_any_shape_never_panics(
        entries in prop::collection::vec((hex64(), prop_oneof![Just(BUNDLE_TYPE.to_string()), ".{0,20}"]), 0..5),
        at in any::<Index>(),
        broken in mutation(),
    ) {
        let mut doc = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": entries.iter().map(|(d, t)| json!({
                "mediaType": OCI_MANIFEST, "digest": d, "size": 100, "artifactType": t,
            })).collect::<Vec<_>>(),
        });
        let keys = mutate(&mut doc, at, &broken);
        let bytes = serde_json::to_vec(&doc).expect("json");
        let parsed = serde_path_to_error_index(&bytes);
        match parsed {
            Ok(index) => {
                let bundles = index
                    .manifests
                    .iter()
                    .filter(|d| d.artifact_type.as_deref() == Some(BUNDLE_TYPE))
                    .count();
                prop_assert!(bundles <= index.manifests.len());
            }
            Err(text) => prop_assert!(names_one_of(&text, &keys), "{text} names none of {keys:?}"),
        }
    }

    #[test]
    fn referrers_are_taken_only_naming_their_subject(
        subject in hex64(),
        other in hex64(),
        bundle in hex64(),
        at in any::<Index>(),
        broken in mutation(),
        mutated in any::<bool>(),
    ) {
        let good = serde_json::to_vec(&referrer(&subject, &bundle)).expect("json");
        let fetched = read(&good).expect("a valid referrer");
        prop_assert!(oci::check_referrer(&fetched, &subject).is_ok());
        let e = oci::check_referrer(&fetched, &other).unwrap_err().to_string();
        prop_assert!(other == subject || e.contains("subject"), "{e}");

        let mut doc = referrer(&subject, &bundle);
        let keys = if mutated { mutate(&mut doc, at, &broken) } else { vec![] };
        let bytes = serde_json::to_vec(&doc).expect("json");
        match read(&bytes) {
            Ok(fetched) => {
                if let Err(e) = oci::check_referrer(&fetched, &subject) {
                    let text = e.to_string();
                    prop_assert!(text.contains("subject"), "{text}");
                }
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(names_one_of(&text, &keys), "{text} names none of {keys:?}");
            }
        }
    }
}

/// The referrers index as oci-client reads it, with the path of a failing
/// field in the message as our own parsers give it.
fn serde_path_to_error_index(bytes: &[u8]) -> Result<oci_client::manifest::OciImageIndex, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value = serde::Deserialize::deserialize(serde_path_to_error::Deserializer::new(
        &mut de, &mut track,
    ));
    value.map_err(|e| format!("{}: {e}", track.path()))
}

// ---- Git advertisement ----

/// One pkt-line.
fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// A protocol v0/v1 advertisement as a server sends it: the first ref with
/// the capabilities after a NUL (or the `capabilities^{}` line of an empty
/// repository), one ref a line, `^{}` lines for peeled tags, a flush.
fn encode_advertisement(refs: &[AdvertisedRef], capabilities: &[String]) -> Vec<u8> {
    let caps = capabilities.join(" ");
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for r in refs {
        lines.push(format!("{} {}", r.target, r.name).into_bytes());
        if let Some(p) = &r.peeled {
            lines.push(format!("{p} {}^{{}}", r.name).into_bytes());
        }
    }
    if lines.is_empty() {
        lines.push(format!("{} capabilities^{{}}", "0".repeat(40)).into_bytes());
    }
    let mut out = Vec::new();
    for (i, mut line) in lines.into_iter().enumerate() {
        if i == 0 {
            line.push(0);
            line.extend_from_slice(caps.as_bytes());
        }
        line.push(b'\n');
        out.extend(pkt(&line));
    }
    out.extend_from_slice(b"0000");
    out
}

/// What the runner makes of advertisement bytes: gix's handshake and ref
/// parser (as a connection runs them), then our reading of it.
fn read_advertisement(bytes: &[u8]) -> Result<Advertisement, String> {
    let mut rd = StreamingPeekableIter::new(bytes, &[PacketLineRef::Flush], false);
    let handshake =
        Handshake::from_lines_with_version_detection(&mut rd).map_err(|e| format!("{e:?}"))?;
    let Handshake {
        capabilities,
        refs,
        protocol,
    } = handshake;
    let refs = match refs {
        Some(mut lines) => {
            from_v1_refs_received_as_part_of_handshake_and_capabilities(
                &mut *lines,
                capabilities.iter(),
            )
            .map_err(|e| format!("{e:?}"))?
            .0
        }
        None => Vec::new(),
    };
    Ok(Advertisement::from_handshake(
        protocol,
        &capabilities,
        &refs,
    ))
}

fn oid() -> impl Strategy<Value = String> {
    "[0-9a-f]{40}".prop_filter("not the null id", |s| s.bytes().any(|b| b != b'0'))
}

fn advertised_refs() -> impl Strategy<Value = Vec<AdvertisedRef>> {
    prop::collection::btree_map(
        prop_oneof!["refs/heads/[a-z0-9_-]{1,10}", "refs/tags/v[0-9]{1,3}"],
        (oid(), prop_oneof![Just(None), oid().prop_map(Some)]),
        0..6,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(name, (target, peeled))| {
                // Only tags peel.
                let peeled = peeled.filter(|_| name.starts_with("refs/tags/"));
                AdvertisedRef {
                    name,
                    target,
                    peeled,
                }
            })
            .collect()
    })
}

fn capabilities() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            Just("multi_ack".to_string()),
            Just("side-band-64k".to_string()),
            Just("allow-tip-sha1-in-want".to_string()),
            Just("allow-reachable-sha1-in-want".to_string()),
            Just("shallow".to_string()),
            Just("agent=git/2.47.0".to_string()),
            "[a-z][a-z0-9-]{0,12}",
        ],
        1..6,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn git_advertisement_of_any_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..60), 0..5),
    ) {
        let _ = read_advertisement(&bytes);
        // Well-framed pkt-lines of any content.
        let mut framed: Vec<u8> = lines.iter().flat_map(|l| pkt(l)).collect();
        framed.extend_from_slice(b"0000");
        let _ = read_advertisement(&framed);
    }

    #[test]
    fn git_advertisement_reads_back_as_advertised(refs in advertised_refs(), caps in capabilities()) {
        let adv = read_advertisement(&encode_advertisement(&refs, &caps)).expect("a valid advertisement");
        prop_assert_eq!(&adv.refs, &refs);
        // Capabilities by name (`agent=git/2.47.0` is `agent`).
        let names: Vec<String> = caps
            .iter()
            .map(|c| c.split('=').next().unwrap_or_default().to_string())
            .collect();
        prop_assert_eq!(&adv.capabilities, &names);
        let expected = if caps.iter().any(|c| c == "allow-reachable-sha1-in-want") {
            ByIdPermission::Reachable
        } else if caps.iter().any(|c| c == "allow-tip-sha1-in-want") {
            ByIdPermission::TipsOnly
        } else {
            ByIdPermission::AdvertisedOnly
        };
        prop_assert_eq!(adv.by_id, expected);
        for r in &refs {
            prop_assert_eq!(adv.find(&r.name), Some(r));
            prop_assert!(adv.ref_at(r.commit()).is_some());
        }
    }

    #[test]
    fn git_advertisement_with_a_changed_byte_never_panics(
        refs in advertised_refs(),
        caps in capabilities(),
        at in any::<Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut bytes = encode_advertisement(&refs, &caps);
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        if let Ok(adv) = read_advertisement(&bytes) {
            // Whatever is read is an object id per ref, never half of one.
            for r in &adv.refs {
                prop_assert_eq!(r.target.len(), 40);
                prop_assert!(r.peeled.as_ref().is_none_or(|p| p.len() == 40));
            }
        }
    }
}

// ---- Flux artifact ----

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).expect("in memory");
    gz.finish().expect("in memory")
}

/// A tar of `files` as a writer lays it out, names kept byte for byte.
fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        let slot = &mut h.as_gnu_mut().expect("a GNU header").name;
        let n = name.len().min(slot.len());
        slot[..n].copy_from_slice(&name.as_bytes()[..n]);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, data.as_slice()).expect("in memory");
    }
    b.into_inner().expect("in memory")
}

fn flux_path() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some(".".to_string())),
        "(\\./)?[a-z]{1,3}/?".prop_map(Some),
        ".{0,12}".prop_map(Some),
    ]
}

/// Whatever the bytes, `files_at` gives checked files or a refusal that says
/// something.
fn check_flux(bytes: &[u8], path: Option<&str>) -> Result<(), TestCaseError> {
    for limits in [Limits::default(), small_limits()] {
        match flux::files_at(bytes, path, &limits) {
            Ok(f) => {
                prop_assert!(!f.files.is_empty());
                prop_assert!(f.files.len() <= limits.max_files);
                prop_assert_eq!(f.manifest.digest(), f.content_digest.clone());
                for key in f.files.keys() {
                    prop_assert!(snapshot::check_key(key).is_ok(), "{key:?}");
                }
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(!text.is_empty(), "{e:?}");
                if let FluxError::NotATarball { reason } = &e {
                    prop_assert!(!reason.is_empty(), "{text}");
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn flux_artifact_of_any_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..1200),
        path in flux_path(),
    ) {
        // The bytes as served, and gzipped so the tar reader sees them too.
        check_flux(&bytes, path.as_deref())?;
        check_flux(&gzip(&bytes), path.as_deref())?;
    }

    #[test]
    fn flux_artifact_with_a_changed_byte_never_panics(
        files in prop::collection::vec(
            (
                prop_oneof!["(\\./)?[a-z]{1,3}/[a-z0-9._]{1,6}", "(\\./)?[a-z0-9._]{1,6}", ".{0,12}"],
                prop::collection::vec(any::<u8>(), 0..40),
            ),
            0..5,
        ),
        path in flux_path(),
        at in any::<Index>(),
        byte in any::<u8>(),
        in_tar in any::<bool>(),
    ) {
        let tar = tar_of(&files);
        check_flux(&gzip(&tar), path.as_deref())?;
        let bytes = if in_tar {
            let mut tar = tar;
            let i = at.index(tar.len());
            tar[i] = byte;
            gzip(&tar)
        } else {
            let mut gz = gzip(&tar);
            let i = at.index(gz.len());
            gz[i] = byte;
            gz
        };
        check_flux(&bytes, path.as_deref())?;
    }
}
