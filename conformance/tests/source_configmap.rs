//! ConfigMap sources (issue 4) on the harness API server: the snapshot the
//! manager takes with `supplychain::snapshot`, written as an immutable
//! ConfigMap and read back, then laid out as the kubelet projects it (the
//! atomic writer's `..data` layout of `conformance::kubelet::volumes`) and
//! checked as the init container checks it. And the source policy's
//! ConfigMap name and size rules, read from a ConfigMap.
//!
//! Acceptance lines shown here: the same files under other keys give the same
//! digest; an edit to an unselected key keeps the digest; an edit to a
//! selected key changes it; a tampered snapshot makes the check step refuse
//! and name the file; a source policy's name rule and size rule refuse with
//! the rule named.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::kubelet::volumes::{FileEntry, atomic_write};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use supplychain::manifest::{Limits, VerifyError};
use supplychain::snapshot::{self, CheckError, MANIFEST_KEY, SourceConfigMap};
use supplychain::source_policy::{SourcePolicy, policy_digest};

/// One test's namespace on the shared harness, deleted at the end of the
/// test, also when it fails (see [`TestNamespace`]).
async fn scope(test: &str) -> anyhow::Result<TestNamespace> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    TestNamespace::new(harness, "src", test, NamespaceSpec::default()).await
}

/// The ConfigMap as the manager reads it: from the API server.
async fn read(s: &TestNamespace, name: &str) -> anyhow::Result<ConfigMap> {
    Ok(s.api::<ConfigMap>().get(name).await?)
}

/// What `supplychain` takes from a ConfigMap: its data, decoded.
fn source_of(cm: &ConfigMap) -> SourceConfigMap {
    SourceConfigMap {
        data: cm.data.clone().unwrap_or_default(),
        binary_data: cm
            .binary_data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
    }
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

/// The snapshot ConfigMap the manager writes: immutable, owned by the
/// resource (here a stand-in ConfigMap; the manager's owner is the PtahSchema).
fn snapshot_object(s: &snapshot::Snapshot, owner: &ConfigMap) -> anyhow::Result<ConfigMap> {
    let owner_ref = owner
        .controller_owner_ref(&())
        .context("the owner has a name and a UID")?;
    let binary: BTreeMap<String, ByteString> = s
        .binary_data()
        .into_iter()
        .map(|(k, v)| (k, ByteString(v)))
        .collect();
    let mut cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": s.name},
        "immutable": true,
        "data": s.data(),
    }))?;
    cm.metadata.owner_references = Some(vec![owner_ref]);
    if !binary.is_empty() {
        cm.binary_data = Some(binary);
    }
    Ok(cm)
}

/// Lays a ConfigMap out in `dir` as the kubelet projects a configMap volume.
fn project(cm: &ConfigMap, dir: &Path) -> anyhow::Result<()> {
    let mut files: Vec<FileEntry> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| FileEntry {
            path: k.clone(),
            data: v.as_bytes().to_vec(),
            mode: 0o644,
        })
        .collect();
    files.extend(cm.binary_data.iter().flatten().map(|(k, v)| FileEntry {
        path: k.clone(),
        data: v.0.clone(),
        mode: 0o644,
    }));
    atomic_write(dir, &files, None)?;
    Ok(())
}

const INIT: &str = "CREATE TABLE users (id bigint PRIMARY KEY);\n";
const USERS: &str = "ALTER TABLE users ADD COLUMN email text;\n";
const BLOB: &[u8] = &[0xde, 0xad, 0xbe, 0xef, 0x00, 0xff];

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_digest_follows_the_selected_files_and_the_check_step_refuses_tampering()
-> anyhow::Result<()> {
    let s = scope("snap").await?;
    let limits = Limits::default();
    let owner = s
        .create::<ConfigMap>(json!({"metadata": {"name": "owner"}, "data": {"role": "stands in for the PtahSchema"}}))
        .await?;
    let owner_uid = owner.metadata.uid.clone().context("owner UID")?;
    s.create::<ConfigMap>(json!({
        "metadata": {"name": "schema"},
        "data": {"001_init.sql": INIT, "002_users.sql": USERS, "notes.txt": "not selected\n"},
        "binaryData": {"seed.bin": ByteString(BLOB.to_vec())},
    }))
    .await?;
    let selected = keys(&["001_init.sql", "002_users.sql", "seed.bin"]);
    let first = snapshot::take(
        &source_of(&read(&s, "schema").await?),
        &selected,
        &owner_uid,
        &limits,
    )?;
    assert_eq!(first.files.len(), 3);

    // The same files under other keys: another ConfigMap, the text files in
    // binaryData and the binary one beside other, unselected keys.
    s.create::<ConfigMap>(json!({
        "metadata": {"name": "elsewhere"},
        "data": {"README.md": "other keys around the same files\n", "zz.sql": "SELECT 1;\n"},
        "binaryData": {
            "001_init.sql": ByteString(INIT.as_bytes().to_vec()),
            "002_users.sql": ByteString(USERS.as_bytes().to_vec()),
            "seed.bin": ByteString(BLOB.to_vec()),
        },
    }))
    .await?;
    let elsewhere = snapshot::take(
        &source_of(&read(&s, "elsewhere").await?),
        &keys(&["seed.bin", "002_users.sql", "001_init.sql"]),
        &owner_uid,
        &limits,
    )?;
    assert_eq!(
        elsewhere.content_digest, first.content_digest,
        "same files, same digest"
    );

    // An edit to an unselected key keeps the digest and the snapshot.
    s.set_config_map_key("schema", "notes.txt", "edited, still not selected\n")
        .await?;
    let unselected = snapshot::take(
        &source_of(&read(&s, "schema").await?),
        &selected,
        &owner_uid,
        &limits,
    )?;
    assert_eq!(unselected.content_digest, first.content_digest);
    assert_eq!(unselected.name, first.name);

    // An edit to a selected key changes the digest and the snapshot.
    s.set_config_map_key(
        "schema",
        "002_users.sql",
        "ALTER TABLE users ADD COLUMN name text;\n",
    )
    .await?;
    let edited = snapshot::take(
        &source_of(&read(&s, "schema").await?),
        &selected,
        &owner_uid,
        &limits,
    )?;
    assert_ne!(edited.content_digest, first.content_digest);
    assert_ne!(edited.name, first.name);

    // The snapshot goes to the API server and comes back byte for byte; the
    // check step accepts it as projected and copies the files.
    s.api::<ConfigMap>()
        .create(&PostParams::default(), &snapshot_object(&first, &owner)?)
        .await?;
    let stored = read(&s, &first.name).await?;
    assert_eq!(stored.immutable, Some(true));
    assert_eq!(
        stored
            .data
            .as_ref()
            .and_then(|d| d.get(MANIFEST_KEY))
            .map(String::as_bytes),
        Some(first.manifest_bytes().as_slice())
    );
    let tmp = tempfile::tempdir()?;
    let mounted = tmp.path().join("snapshot");
    let work = tmp.path().join("work");
    project(&stored, &mounted)?;
    assert!(mounted.join("..data").is_symlink(), "the kubelet's layout");
    let manifest = snapshot::check_mounted(&mounted, &first.content_digest, &work, &limits)?;
    assert_eq!(manifest.digest(), first.content_digest);
    assert_eq!(std::fs::read(work.join("001_init.sql"))?, INIT.as_bytes());
    assert_eq!(std::fs::read(work.join("seed.bin"))?, BLOB);
    assert!(!work.join(MANIFEST_KEY).exists());

    // The snapshot is immutable: an edit is refused by the API server.
    let refused = s
        .api::<ConfigMap>()
        .patch(
            &first.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"002_users.sql": "DROP TABLE users;\n"}})),
        )
        .await;
    match refused {
        Err(kube::Error::Api(e)) if e.code == 422 => {}
        other => bail!("an edit of an immutable snapshot was not refused: {other:?}"),
    }

    // A snapshot replaced under the same name (deleted and recreated with one
    // file changed) is refused by the check step, naming the file.
    s.api::<ConfigMap>()
        .delete(&first.name, &DeleteParams::default())
        .await?;
    let mut forged = snapshot_object(&first, &owner)?;
    if let Some(data) = forged.data.as_mut() {
        data.insert("002_users.sql".into(), "DROP TABLE users; --\n".into());
    }
    s.api::<ConfigMap>()
        .create(&PostParams::default(), &forged)
        .await?;
    let tampered = read(&s, &first.name).await?;
    let mounted = tmp.path().join("tampered");
    let work = tmp.path().join("tampered-work");
    project(&tampered, &mounted)?;
    let err = snapshot::check_mounted(&mounted, &first.content_digest, &work, &limits)
        .expect_err("a tampered snapshot is refused");
    assert_eq!(err.path(), Some("002_users.sql"), "{err}");
    assert!(err.to_string().contains("002_users.sql"), "{err}");
    assert!(!work.exists(), "nothing reaches the operation container");

    // A file added to the mounted volume (the projection itself tampered).
    let mounted = tmp.path().join("extra");
    project(&stored, &mounted)?;
    std::fs::write(mounted.join("000_evil.sql"), "DROP TABLE users;\n")?;
    let err = snapshot::check_mounted(
        &mounted,
        &first.content_digest,
        &tmp.path().join("w2"),
        &limits,
    )
    .expect_err("an extra file is refused");
    assert!(
        matches!(&err, CheckError::Verify(VerifyError::Extra { path }) if path == "000_evil.sql"),
        "{err}"
    );
    Ok(())
}

const POLICY: &str = "\
version: 1
rules:
  - configMap:
      names: [\"schema-*\"]
      maxSize: 64
";

#[tokio::test(flavor = "multi_thread")]
async fn source_policy_refuses_a_config_map_by_name_and_by_size() -> anyhow::Result<()> {
    let s = scope("policy").await?;
    let limits = Limits::default();
    let stored = s
        .create::<ConfigMap>(
            json!({"metadata": {"name": "source-policy"}, "data": {"policy.yaml": POLICY}}),
        )
        .await?;
    let bytes = stored
        .data
        .as_ref()
        .and_then(|d| d.get("policy.yaml"))
        .context("policy key")?
        .as_bytes()
        .to_vec();
    let policy = SourcePolicy::parse(&bytes)?;
    assert_eq!(
        policy_digest(&bytes),
        supplychain::sha256_digest(POLICY.as_bytes())
    );

    // Checked before a snapshot is written: the name, then the size of the
    // selected files.
    let check = |name: &str, cm: &ConfigMap| -> anyhow::Result<Result<(), String>> {
        let files = snapshot::select_files(&source_of(cm), &[])?;
        let size: u64 = files.values().map(|v| v.len() as u64).sum();
        Ok(policy
            .check_config_map(name, size, files.len() as u64)
            .map_err(|r| r.to_string()))
    };
    let ok = s
        .create::<ConfigMap>(
            json!({"metadata": {"name": "schema-app"}, "data": {"001.sql": "SELECT 1;\n"}}),
        )
        .await?;
    assert_eq!(check("schema-app", &read(&s, "schema-app").await?)?, Ok(()));
    let _ = snapshot::take(&source_of(&ok), &[], "owner-uid", &limits)?;

    s.create::<ConfigMap>(
        json!({"metadata": {"name": "rogue"}, "data": {"001.sql": "SELECT 1;\n"}}),
    )
    .await?;
    assert_eq!(
        check("rogue", &read(&s, "rogue").await?)?,
        Err("rules[0] (configMap.names): ConfigMap name rogue matches no allowed pattern".into())
    );

    s.create::<ConfigMap>(
        json!({"metadata": {"name": "schema-big"}, "data": {"001.sql": "x".repeat(65)}}),
    )
    .await?;
    assert_eq!(
        check("schema-big", &read(&s, "schema-big").await?)?,
        Err("rules[0] (configMap.maxSize): the selected files hold 65 bytes, more than 64".into())
    );
    Ok(())
}
