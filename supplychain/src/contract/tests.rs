use super::*;

const UID: &str = "0b0c6a4e-7f1f-4a55-9a0e-3c1f0b2d4e5a";
const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const D3: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
const D4: &str = "sha256:4444444444444444444444444444444444444444444444444444444444444444";
const D5: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";
const D6: &str = "sha256:6666666666666666666666666666666666666666666666666666666666666666";
const EXECUTOR: &str = "ghcr.io/stokaro/ptah-executor@sha256:7777777777777777777777777777777777777777777777777777777777777777";

fn policy() -> PolicyRef {
    PolicyRef {
        uid: "9d2e0b6c-0000-4000-8000-000000000001".into(),
        digest: D6.into(),
    }
}

fn execution() -> ExecutionBinding {
    ExecutionBinding {
        epoch: "v1-0123456789abcdef0123456789abcdef".into(),
        controller_state_version: 1,
        ptah_version: "v0.42.0".into(),
        executor_image: EXECUTOR.into(),
        runner_protocol_version: 1,
    }
}

fn schema_binding() -> SchemaPlanBinding {
    SchemaPlanBinding {
        schema_uid: UID.into(),
        plan_content_digest: D1.into(),
        source: SourceBinding::config_map(
            "5f1d7c2a-0000-4000-8000-00000000cafe",
            D2,
            "ptah-src-faf0a6d1f11296c9164cea2779cabc25",
            Some(policy()),
        ),
        coordination_digest: D3.into(),
        target_identity_digest: D4.into(),
        actual_state_fingerprint: "from-1".into(),
        desired_state_fingerprint: "to-1".into(),
        policy_fingerprint: D5.into(),
        execution: execution(),
        dialect: "postgres".into(),
        destructive: false,
        privilege_changes: vec!["Grant".into(), " Role ".into(), "Grant".into()],
        statement_count: 3,
    }
}

fn migration_binding() -> MigrationPlanBinding {
    MigrationPlanBinding {
        migration_uid: UID.into(),
        migrations: vec![
            PlannedMigration {
                version: 2,
                version_key: Some("0000000002".into()),
                checksum: D1.into(),
                checkpoint: false,
                transaction_mode: None,
            },
            PlannedMigration {
                version: 3,
                version_key: None,
                checksum: D2.into(),
                checkpoint: true,
                transaction_mode: Some("None".into()),
            },
        ],
        history_fingerprint: D3.into(),
        current_version: 1,
        source: SourceBinding::git(
            "https://git.example.com/org/db.git",
            Some("migrations"),
            "0123456789abcdef0123456789abcdef01234567",
            D2,
            None,
        )
        .unwrap(),
        coordination_digest: D3.into(),
        target_identity_digest: D4.into(),
        policy_fingerprint: D5.into(),
        transaction_mode: None,
        execution: execution(),
    }
}

#[test]
fn canonical_json_follows_jcs_for_the_subset() {
    let v = json!({
        "b": [1, -2, true, false, null, 9007199254740991i64],
        "a": {"z": "", "y": "\"\\/\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}é€😀"},
        "\u{20ac}": 1,
        "\u{1F600}": 2,
        "\u{fb01}": 3,
        "A": 0,
    });
    let bytes = canonical_json(&v).unwrap();
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "{\"A\":0,\"a\":{\"y\":\"\\\"\\\\/\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}é€😀\",\"z\":\"\"},\
         \"b\":[1,-2,true,false,null,9007199254740991],\"€\":1,\"😀\":2,\"ﬁ\":3}"
    );
    // Floats and integers JCS would round are refused, naming the place.
    let err = canonical_json(&json!({"a": [0, 1.5]})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "$.a[1]: 1.5 is not an integer within ±(2^53-1)"
    );
    assert!(canonical_json(&json!(9007199254740992u64)).is_err());
    assert!(canonical_json(&json!(-9007199254740992i64)).is_err());
    assert!(canonical_json(&json!(u64::MAX)).is_err());
}

const GOLDEN_SCHEMA: &str = include_str!("../../tests/golden/schema_plan_v2.json");
const GOLDEN_MIGRATION: &str = include_str!("../../tests/golden/migration_plan_v2.json");

#[test]
fn golden_canonical_json_and_fingerprints() {
    let schema = schema_binding();
    let migration = migration_binding();
    if std::env::var_os("PTAH_BLESS").is_some() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/");
        let mut s = schema.canonical_json().unwrap();
        s.push(b'\n');
        std::fs::write(format!("{dir}schema_plan_v2.json"), s).unwrap();
        let mut m = migration.canonical_json().unwrap();
        m.push(b'\n');
        std::fs::write(format!("{dir}migration_plan_v2.json"), m).unwrap();
    }
    assert_eq!(
        String::from_utf8(schema.canonical_json().unwrap()).unwrap(),
        GOLDEN_SCHEMA.trim_end_matches('\n')
    );
    assert_eq!(
        schema.fingerprint().unwrap(),
        crate::sha256_digest(GOLDEN_SCHEMA.trim_end_matches('\n').as_bytes())
    );
    assert_eq!(
        String::from_utf8(migration.canonical_json().unwrap()).unwrap(),
        GOLDEN_MIGRATION.trim_end_matches('\n')
    );
    // Fixed values: a change here retires every plan in every cluster.
    assert_eq!(
        schema.fingerprint().unwrap(),
        "sha256:4662294f29fed4c86bee42582608ba4e0cb6868c047c415d69c7f7e5112f9bff"
    );
    assert_eq!(
        migration.fingerprint().unwrap(),
        "sha256:eae40a221ad797d38026a5b0f2a41770b6ab3d3c8f4bb8c29d3c793b5c5656cb"
    );
}

fn all_distinct(fps: &[(String, String)]) {
    for (i, (a_name, a)) in fps.iter().enumerate() {
        for (b_name, b) in &fps[i + 1..] {
            assert_ne!(a, b, "{a_name} and {b_name} give one fingerprint");
        }
    }
}

#[test]
fn every_bound_input_of_a_schema_plan_changes_the_fingerprint() {
    type Edit = fn(&mut SchemaPlanBinding);
    let edits: &[(&str, Edit)] = &[
        ("unchanged", |_| {}),
        ("schema UID", |b| b.schema_uid = "other-uid".into()),
        ("plan content digest", |b| b.plan_content_digest = D6.into()),
        ("source content digest", |b| {
            b.source.content_digest = D6.into()
        }),
        ("ConfigMap UID", |b| {
            b.source.config_map_uid = Some("other-cm".into())
        }),
        ("source policy UID", |b| {
            b.source.source_policy_uid = Some("other-policy".into())
        }),
        ("source policy digest", |b| {
            b.source.source_policy_digest = Some(D1.into())
        }),
        ("no source policy", |b| {
            b.source.source_policy_uid = None;
            b.source.source_policy_digest = None;
        }),
        ("source kind Git", |b| {
            b.source = SourceBinding::git("https://h/r.git", None, "c", D2, Some(policy())).unwrap()
        }),
        ("source kind OCI", |b| {
            b.source =
                SourceBinding::oci("r@sha256:x", D2, policy(), &SignerEvidence::default()).unwrap()
        }),
        ("coordination digest", |b| b.coordination_digest = D6.into()),
        ("target identity digest", |b| {
            b.target_identity_digest = D6.into()
        }),
        ("actual state", |b| {
            b.actual_state_fingerprint = "from-2".into()
        }),
        ("desired state", |b| {
            b.desired_state_fingerprint = "to-2".into()
        }),
        ("spec.policy digest", |b| b.policy_fingerprint = D6.into()),
        ("epoch", |b| {
            b.execution.epoch = "v1-ffffffffffffffffffffffffffffffff".into()
        }),
        ("controller state version", |b| {
            b.execution.controller_state_version = 2
        }),
        ("Ptah version", |b| {
            b.execution.ptah_version = "v0.43.0".into()
        }),
        ("executor image", |b| {
            b.execution.executor_image = "img@sha256:0".into()
        }),
        ("runner protocol version", |b| {
            b.execution.runner_protocol_version = 2
        }),
        ("dialect", |b| b.dialect = "mysql".into()),
        ("destructive", |b| b.destructive = true),
        ("privilege changes", |b| {
            b.privilege_changes.push("Revoke".into())
        }),
        ("statement count", |b| b.statement_count = 4),
    ];
    let mut fps = Vec::new();
    for (name, edit) in edits {
        let mut b = schema_binding();
        edit(&mut b);
        fps.push((
            name.to_string(),
            b.fingerprint().unwrap_or_else(|e| panic!("{name}: {e}")),
        ));
    }
    all_distinct(&fps);
}

#[test]
fn every_bound_input_of_a_migration_plan_changes_the_fingerprint() {
    type Edit = fn(&mut MigrationPlanBinding);
    let edits: &[(&str, Edit)] = &[
        ("unchanged", |_| {}),
        ("migration UID", |b| b.migration_uid = "other".into()),
        ("a version", |b| b.migrations[1].version = 4),
        ("a version key", |b| b.migrations[0].version_key = None),
        ("a checksum", |b| b.migrations[0].checksum = D6.into()),
        ("a checkpoint", |b| b.migrations[0].checkpoint = true),
        ("a declared transaction mode", |b| {
            b.migrations[0].transaction_mode = Some("All".into())
        }),
        ("the order", |b| b.migrations.reverse()),
        ("a dropped migration", |b| {
            b.migrations.pop();
        }),
        ("history fingerprint", |b| b.history_fingerprint = D6.into()),
        ("current version", |b| b.current_version = 0),
        ("Git URL", |b| {
            b.source = SourceBinding::git(
                "https://git.example.com/org/other.git",
                Some("migrations"),
                "0123456789abcdef0123456789abcdef01234567",
                D2,
                None,
            )
            .unwrap()
        }),
        ("Git path", |b| {
            b.source = SourceBinding::git(
                "https://git.example.com/org/db.git",
                Some("db/migrations"),
                "0123456789abcdef0123456789abcdef01234567",
                D2,
                None,
            )
            .unwrap()
        }),
        ("content digest", |b| b.source.content_digest = D6.into()),
        ("a source policy", |b| {
            b.source.source_policy_uid = Some("p".into());
            b.source.source_policy_digest = Some(D1.into());
        }),
        ("coordination digest", |b| b.coordination_digest = D6.into()),
        ("target identity digest", |b| {
            b.target_identity_digest = D6.into()
        }),
        ("spec.policy digest", |b| b.policy_fingerprint = D6.into()),
        ("policy transaction mode", |b| {
            b.transaction_mode = Some("PerMigration".into())
        }),
        ("executor image", |b| {
            b.execution.executor_image = "img@sha256:0".into()
        }),
        ("epoch", |b| {
            b.execution.epoch = "v1-ffffffffffffffffffffffffffffffff".into()
        }),
    ];
    let mut fps = Vec::new();
    for (name, edit) in edits {
        let mut b = migration_binding();
        edit(&mut b);
        fps.push((
            name.to_string(),
            b.fingerprint().unwrap_or_else(|e| panic!("{name}: {e}")),
        ));
    }
    all_distinct(&fps);
}

#[test]
fn every_bound_oci_input_changes_the_fingerprint() {
    let evidence = SignerEvidence {
        authority: Some("release".into()),
        issuer: Some("https://issuer.example".into()),
        subject: Some("ci@example.com".into()),
        key_fingerprint: None,
        trust_root_digest: Some(D3.into()),
        signature_digest: Some(D4.into()),
        transparency_log_verified: Some(true),
    };
    let with = |e: &SignerEvidence, p: PolicyRef, digest: &str| {
        let mut b = schema_binding();
        b.source = SourceBinding::oci("r.example/a/b@sha256:1", digest, p, e).unwrap();
        b.fingerprint().unwrap()
    };
    let mut fps = vec![("base".to_string(), with(&evidence, policy(), D2))];
    fps.push(("artifact digest".into(), with(&evidence, policy(), D1)));
    fps.push((
        "verification policy UID".into(),
        with(
            &evidence,
            PolicyRef {
                uid: "x".into(),
                digest: D6.into(),
            },
            D2,
        ),
    ));
    fps.push((
        "verification policy digest".into(),
        with(
            &evidence,
            PolicyRef {
                uid: policy().uid,
                digest: D1.into(),
            },
            D2,
        ),
    ));
    type Edit = fn(&mut SignerEvidence);
    let edits: &[(&str, Edit)] = &[
        ("authority", |e| e.authority = None),
        ("issuer", |e| e.issuer = Some("https://other".into())),
        ("subject", |e| e.subject = Some("other@example.com".into())),
        ("key fingerprint", |e| e.key_fingerprint = Some(D5.into())),
        ("trust root", |e| e.trust_root_digest = Some(D5.into())),
        ("signature", |e| e.signature_digest = Some(D5.into())),
        ("transparency log", |e| {
            e.transparency_log_verified = Some(false)
        }),
    ];
    for (name, edit) in edits {
        let mut e = evidence.clone();
        edit(&mut e);
        fps.push((name.to_string(), with(&e, policy(), D2)));
    }
    all_distinct(&fps);
}

/// The operator's side, as the manager will do it: the binding is made from a
/// resource's spec and its status, reading `spec.policy` through
/// [`policy_fingerprint`] and nothing else of the spec.
fn binding_from_spec(spec: &Value) -> SchemaPlanBinding {
    let mut b = schema_binding();
    b.policy_fingerprint = policy_fingerprint(&spec["policy"]).unwrap();
    b
}

#[test]
fn scheduling_fields_and_evidence_do_not_change_the_fingerprint() {
    let spec = json!({
        "policy": {"apply": "OnApproval", "allowDestructive": false, "protectedTables": ["users"]},
        "interval": "10m",
        "suspend": false,
        "execution": {
            "resources": {"limits": {"memory": "256Mi"}},
            "nodeSelector": {"disk": "ssd"},
            "podMetadata": {"labels": {"team": "db"}},
        },
    });
    let base = binding_from_spec(&spec).fingerprint().unwrap();
    let scheduling: &[(&str, &str, Value)] = &[
        ("interval", "/interval", json!("1h")),
        ("suspend", "/suspend", json!(true)),
        (
            "resources",
            "/execution/resources",
            json!({"limits": {"memory": "1Gi"}}),
        ),
        ("nodeSelector", "/execution/nodeSelector", json!({})),
        (
            "podMetadata",
            "/execution/podMetadata",
            json!({"annotations": {"a": "b"}}),
        ),
    ];
    for (name, pointer, value) in scheduling {
        let mut s = spec.clone();
        *s.pointer_mut(pointer).unwrap() = value.clone();
        assert_eq!(
            binding_from_spec(&s).fingerprint().unwrap(),
            base,
            "{name} changed it"
        );
    }
    // A policy field does change it, whatever the key order.
    let mut s = spec.clone();
    s["policy"]["protectedTables"] = json!(["users", "orders"]);
    assert_ne!(binding_from_spec(&s).fingerprint().unwrap(), base);
    let reordered: Value = serde_json::from_str(
        r#"{"policy": {"protectedTables": ["users"], "allowDestructive": false, "apply": "OnApproval"}}"#,
    )
    .unwrap();
    assert_eq!(binding_from_spec(&reordered).fingerprint().unwrap(), base);

    // Evidence only: the snapshot name, a new commit with the same files, the
    // reference spelling of an OCI digest.
    let unedited = schema_binding().fingerprint().unwrap();
    let mut b = schema_binding();
    b.source.snapshot_name = Some("ptah-src-other".into());
    assert_eq!(b.fingerprint().unwrap(), unedited);
    let git = |commit: &str| {
        let mut b = schema_binding();
        b.source = SourceBinding::git("https://h/r.git", Some("db"), commit, D2, None).unwrap();
        b.fingerprint().unwrap()
    };
    assert_eq!(git("aaaa"), git("bbbb"));
    let oci = |reference: &str| {
        let mut b = schema_binding();
        b.source = SourceBinding::oci(reference, D2, policy(), &SignerEvidence::default()).unwrap();
        b.fingerprint().unwrap()
    };
    assert_eq!(oci("a.example/x@sha256:2"), oci("a.example/x:v1@sha256:2"));
}

#[test]
fn git_location_digest_is_of_url_and_canonical_path() {
    let url = "https://git.example.com/org/db.git";
    let root = git_location_digest(url, None).unwrap();
    assert_eq!(git_location_digest(url, Some("")).unwrap(), root);
    assert_eq!(git_location_digest(url, Some(".")).unwrap(), root);
    let db = git_location_digest(url, Some("db")).unwrap();
    assert_eq!(git_location_digest(url, Some("./db/")).unwrap(), db);
    assert_ne!(db, root);
    assert_ne!(
        git_location_digest("https://git.example.com/org/db.git/", Some("db")).unwrap(),
        db
    );
    // Not a concatenation: "…/a" + "b/c" differs from "…/a/b" + "c".
    assert_ne!(
        git_location_digest("https://h/a", Some("b/c")).unwrap(),
        git_location_digest("https://h/a/b", Some("c")).unwrap()
    );
    assert_eq!(
        root,
        crate::sha256_digest(format!("{{\"path\":\"\",\"url\":\"{url}\"}}").as_bytes())
    );
    assert!(git_location_digest(url, Some("../x")).is_err());
    assert!(git_location_digest("", None).is_err());
}

#[test]
fn bindings_refuse_missing_and_foreign_fields() {
    let mut b = schema_binding();
    b.source.config_map_uid = None;
    assert_eq!(
        b.fingerprint().unwrap_err().to_string(),
        "source.configMapUID: is missing"
    );
    let mut b = schema_binding();
    b.source.location_digest = Some(D1.into());
    assert!(
        b.fingerprint()
            .unwrap_err()
            .to_string()
            .contains("another source kind")
    );
    let mut b = schema_binding();
    b.source.source_policy_digest = None;
    assert!(b.fingerprint().is_err(), "half a policy");
    let mut b = schema_binding();
    b.statement_count = 0;
    assert!(b.fingerprint().is_err());
    let mut b = schema_binding();
    b.execution.epoch = "v2-x".into();
    assert!(b.fingerprint().is_err());
    let mut b = schema_binding();
    b.schema_uid.clear();
    assert!(b.fingerprint().is_err());
    let mut m = migration_binding();
    m.migrations.clear();
    assert!(m.fingerprint().is_err());
}

#[test]
fn source_binding_serializes_with_the_api_field_names() {
    let b = SourceBinding::config_map("cm", D2, "ptah-src-x", Some(policy()));
    let v = serde_json::to_value(&b).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "configMapUID",
            "contentDigest",
            "kind",
            "snapshotName",
            "sourcePolicyDigest",
            "sourcePolicyUID"
        ]
    );
    let oci = SourceBinding::oci("r@sha256:1", D1, policy(), &SignerEvidence::default()).unwrap();
    let v = serde_json::to_value(&oci).unwrap();
    for k in [
        "verificationPolicyUID",
        "verificationPolicyDigest",
        "signerEvidenceDigest",
        "resolvedReference",
    ] {
        assert!(v.get(k).is_some(), "{k}");
    }
    assert_eq!(v["kind"], "OCI");
    let back: SourceBinding = serde_json::from_value(v).unwrap();
    assert_eq!(back, oci);
}

#[test]
fn every_bound_flux_input_changes_the_fingerprint_and_its_evidence_does_not() {
    let evidence = SignerEvidence {
        subject: Some("ci@example.com".into()),
        ..SignerEvidence::default()
    };
    let with = |uid: &str, revision: &str, content: &str, snapshot: &str, verified: bool| {
        let mut b = schema_binding();
        let v = verified.then(|| ("oci://r/a@sha256:1", policy(), &evidence));
        b.source = SourceBinding::flux(uid, revision, content, snapshot, v).unwrap();
        b.fingerprint().unwrap()
    };
    let base = with("u", "main@sha1:aa", D2, "ptah-src-1", false);
    let fps = vec![
        ("base".to_string(), base.clone()),
        (
            "object UID".into(),
            with("v", "main@sha1:aa", D2, "ptah-src-1", false),
        ),
        // Flux's revision is bound: another commit is another plan.
        (
            "revision".into(),
            with("u", "main@sha1:bb", D2, "ptah-src-1", false),
        ),
        (
            "content".into(),
            with("u", "main@sha1:aa", D1, "ptah-src-1", false),
        ),
        (
            "verified".into(),
            with("u", "main@sha1:aa", D2, "ptah-src-1", true),
        ),
    ];
    all_distinct(&fps);
    assert_eq!(
        with("u", "main@sha1:aa", D2, "ptah-src-2", false),
        base,
        "the snapshot's name is evidence, not bound"
    );
}

#[test]
fn flux_fields_on_another_kind_and_half_a_verification_are_refused() {
    let mut git = SourceBinding::git("https://h/r.git", None, "c", D2, None).unwrap();
    git.flux_revision = Some("main@sha1:aa".into());
    let err = git.document().unwrap_err().to_string();
    assert!(err.contains("source.fluxObjectUID"), "{err}");
    let mut flux = SourceBinding::flux("u", "r", D2, "ptah-src-1", None).unwrap();
    flux.verification_policy_uid = Some("p".into());
    let err = flux.document().unwrap_err().to_string();
    assert!(err.contains("source.verificationPolicyUID"), "{err}");
    let mut missing = SourceBinding::flux("u", "r", D2, "ptah-src-1", None).unwrap();
    missing.flux_revision = None;
    let err = missing.document().unwrap_err().to_string();
    assert!(err.contains("source.fluxRevision"), "{err}");
}
