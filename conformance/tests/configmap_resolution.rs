//! The manager-side Resolve of a ConfigMap source (issue 4, build item 3) on
//! the harness API server, with a real PtahSchema as the owner and the real
//! controller-manager's garbage collector: the immutable `ptah-src-<hash>`
//! snapshot the resource owns, its reuse and replacement, the deletion of
//! snapshots nothing names any more, the source policy's refusals before
//! anything is written, and the pre-dispatch check that refuses a snapshot
//! deleted or replaced under an operation.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use operator::api::PtahSchema;
use operator::api::common::ConfigMapKeyRef;
use operator::api::source::{ConfigMapSource, SourceKind};
use operator::execution::job::ANNOTATION_CONTENT_DIGEST;
use operator::execution::snapshot::{
    COMPONENT, LABEL_OWNER_UID, Owner, ResolveError, SnapshotHold, collect_snapshots,
    resolve_configmap, snapshot_still_holds,
};
use supplychain::manifest::Limits;
use supplychain::snapshot::{self, MANIFEST_KEY, SourceConfigMap};
use supplychain::source_policy::policy_digest;

/// One test's namespace on the shared harness, deleted at the end of the
/// test, also when it fails (see [`TestNamespace`]).
struct Scope(TestNamespace);

impl std::ops::Deref for Scope {
    type Target = TestNamespace;
    fn deref(&self) -> &TestNamespace {
        &self.0
    }
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        Ok(Scope(
            TestNamespace::new(harness, "cmres", test, NamespaceSpec::default().with_crds())
                .await?,
        ))
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        self.api()
    }

    fn schemas(&self) -> Api<PtahSchema> {
        self.api()
    }

    /// A real PtahSchema whose source is the ConfigMap `source`, as stored.
    async fn schema(&self, name: &str, source: &str, keys: &[&str]) -> anyhow::Result<Owner> {
        let schema: PtahSchema = serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": "PtahSchema",
            "metadata": {"name": name},
            "spec": {
                "target": {
                    "engine": "PostgreSQL",
                    "urlFrom": {"name": "db", "key": "url"},
                    "coordinationKey": "primary",
                },
                "source": {"configMap": {"name": source, "keys": keys}},
                "policy": {"apply": "OnApproval"},
                "interval": "10m",
            },
        }))?;
        let stored = self
            .schemas()
            .create(&PostParams::default(), &schema)
            .await?;
        Ok(Owner::of(&stored)?)
    }

    /// The snapshots in the namespace (by the component label).
    async fn snapshots(&self) -> anyhow::Result<Vec<String>> {
        let list = self
            .config_maps()
            .list(
                &ListParams::default().labels(&format!("app.kubernetes.io/component={COMPONENT}")),
            )
            .await?;
        let mut names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
        names.sort();
        Ok(names)
    }
}

fn source_spec(name: &str, keys: &[&str]) -> ConfigMapSource {
    ConfigMapSource {
        name: name.to_string(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
    }
}

/// Every key of a ConfigMap with its bytes, as the check step reads them.
fn keys_of(cm: &ConfigMap) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut keys: std::collections::BTreeMap<String, Vec<u8>> = cm
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    keys.extend(
        cm.binary_data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    keys
}

const INIT: &str = "CREATE TABLE users (id bigint PRIMARY KEY);\n";
const USERS: &str = "ALTER TABLE users ADD COLUMN email text;\n";
const SELECTED: &[&str] = &["001_init.sql", "002_users.sql"];

async fn wait_gone(api: &Api<ConfigMap>, name: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if api.get_opt(name).await?.is_none() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{name} still exists after 120s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resolution_writes_reuses_and_replaces_an_owned_immutable_snapshot() -> anyhow::Result<()> {
    let s = Scope::new("res").await?;
    let source = s
        .create::<ConfigMap>(json!({
            "metadata": {"name": "schema"},
            "data": {"001_init.sql": INIT, "002_users.sql": USERS, "notes.txt": "not selected\n"},
        }))
        .await?;
    let owner = s.schema("orders", "schema", SELECTED).await?;
    let spec = source_spec("schema", SELECTED);

    // The first resolution writes the snapshot: immutable, owned by the
    // PtahSchema, its files giving the digest the pure layer computes.
    let first = resolve_configmap(s.client(), &owner, &spec, None).await?;
    assert!(first.created);
    let expected = snapshot::take(
        &SourceConfigMap {
            data: source.data.clone().unwrap_or_default(),
            binary_data: Default::default(),
        },
        &spec.keys,
        &owner.uid,
        &Limits::default(),
    )?;
    assert_eq!(first.content_digest, expected.content_digest);
    assert_eq!(first.snapshot_name, expected.name);
    assert_eq!(first.files, 2);
    assert_eq!(first.config_map_uid, source.uid().context("source UID")?);
    let stored = s.config_maps().get(&first.snapshot_name).await?;
    assert_eq!(stored.immutable, Some(true));
    let refs = stored.owner_references();
    assert_eq!(refs.len(), 1);
    assert_eq!(
        (refs[0].kind.as_str(), refs[0].uid.as_str()),
        ("PtahSchema", owner.uid.as_str())
    );
    assert_eq!(stored.labels()[LABEL_OWNER_UID], owner.uid);
    assert_eq!(
        stored.annotations()[ANNOTATION_CONTENT_DIGEST],
        first.content_digest
    );
    assert!(!keys_of(&stored).contains_key("notes.txt"));
    snapshot::check_files(&keys_of(&stored), &first.content_digest, &Limits::default())?;
    let status = first.source_status(None);
    assert_eq!(status.kind, SourceKind::ConfigMap);
    assert_eq!(status.revision, format!("schema@{}", first.content_digest));
    assert_eq!(
        status.config_map.as_ref().map(|c| c.snapshot_uid.clone()),
        Some(stored.uid())
    );

    // The snapshot is immutable on the server: an edit is refused.
    let edit = s
        .config_maps()
        .patch(
            &first.snapshot_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"001_init.sql": "DROP TABLE users;\n"}})),
        )
        .await;
    assert!(edit.is_err(), "an immutable ConfigMap refuses edits");

    // Resolving again without a change reuses it: no new object.
    let again = resolve_configmap(s.client(), &owner, &spec, None).await?;
    assert!(!again.created);
    let mut reused = first.clone();
    reused.created = false;
    assert_eq!(again, reused, "same snapshot, same UID");
    assert_eq!(s.snapshots().await?, vec![first.snapshot_name.clone()]);

    // An edit to an unselected key keeps the digest and the snapshot.
    s.set_config_map_key("schema", "notes.txt", "edited, still not selected\n")
        .await?;
    let unselected = resolve_configmap(s.client(), &owner, &spec, None).await?;
    assert!(!unselected.created);
    assert_eq!(unselected.content_digest, first.content_digest);
    assert_eq!(unselected.snapshot_name, first.snapshot_name);
    assert_eq!(s.snapshots().await?, vec![first.snapshot_name.clone()]);

    // An edit to a selected key makes a new snapshot beside the old one...
    s.set_config_map_key(
        "schema",
        "002_users.sql",
        "ALTER TABLE users ADD COLUMN name text;\n",
    )
    .await?;
    let edited = resolve_configmap(s.client(), &owner, &spec, None).await?;
    assert!(edited.created);
    assert_ne!(edited.content_digest, first.content_digest);
    assert_ne!(edited.snapshot_name, first.snapshot_name);
    assert_eq!(s.snapshots().await?.len(), 2);

    // ...and once the new resolution is stored, the old one, named by
    // nothing, is deleted; the one still named stays.
    let deleted = collect_snapshots(
        s.client(),
        &owner,
        std::slice::from_ref(&edited.snapshot_name),
    )
    .await?;
    assert_eq!(deleted, vec![first.snapshot_name.clone()]);
    assert_eq!(s.snapshots().await?, vec![edited.snapshot_name.clone()]);
    // Collecting again deletes nothing.
    assert!(
        collect_snapshots(
            s.client(),
            &owner,
            std::slice::from_ref(&edited.snapshot_name)
        )
        .await?
        .is_empty()
    );

    // Another resource's snapshots are not this one's to collect.
    let other = s.schema("other", "schema", SELECTED).await?;
    let theirs = resolve_configmap(s.client(), &other, &spec, None).await?;
    assert_ne!(
        theirs.snapshot_name, edited.snapshot_name,
        "the owner UID is in the name"
    );

    // The source moved to Git or OCI: its first resolution names no snapshot,
    // and the last one goes.
    let deleted = collect_snapshots(s.client(), &owner, &[]).await?;
    assert_eq!(deleted, vec![edited.snapshot_name.clone()]);
    assert_eq!(s.snapshots().await?, vec![theirs.snapshot_name.clone()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_owner_lets_the_garbage_collector_remove_its_snapshots() -> anyhow::Result<()>
{
    let s = Scope::new("gc").await?;
    s.create::<ConfigMap>(json!({
        "metadata": {"name": "schema"},
        "data": {"001_init.sql": INIT, "002_users.sql": USERS},
    }))
    .await?;
    let owner = s.schema("orders", "schema", &[]).await?;
    let r = resolve_configmap(s.client(), &owner, &source_spec("schema", &[]), None).await?;
    assert!(s.config_maps().get_opt(&r.snapshot_name).await?.is_some());
    s.schemas()
        .delete(&owner.name, &DeleteParams::background())
        .await?;
    wait_gone(&s.config_maps(), &r.snapshot_name).await?;
    // The source ConfigMap is not the resource's: it stays.
    assert!(s.config_maps().get_opt("schema").await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_policy_refuses_by_name_and_by_size_before_any_snapshot_is_written()
-> anyhow::Result<()> {
    let s = Scope::new("pol").await?;
    let policy_text =
        "version: 1\nrules:\n  - configMap:\n      names: [\"schema-*\"]\n      maxSize: 100\n";
    let policy_cm = s
        .create::<ConfigMap>(
            json!({"metadata": {"name": "policy"}, "data": {"policy.yaml": policy_text}}),
        )
        .await?;
    let policy = ConfigMapKeyRef {
        name: "policy".into(),
        key: "policy.yaml".into(),
    };
    s.create::<ConfigMap>(json!({"metadata": {"name": "other"}, "data": {"a.sql": INIT}}))
        .await?;
    s.create::<ConfigMap>(
        json!({"metadata": {"name": "schema-big"}, "data": {"a.sql": "x".repeat(101)}}),
    )
    .await?;
    s.create::<ConfigMap>(json!({"metadata": {"name": "schema-ok"}, "data": {"a.sql": INIT}}))
        .await?;
    let owner = s.schema("orders", "other", &[]).await?;

    // By name.
    let err = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("other", &[]),
        Some(&policy),
    )
    .await
    .err()
    .context("a name outside the policy is refused")?;
    assert!(matches!(err, ResolveError::Refused { .. }), "{err}");
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(msg.contains("rules[0] (configMap.names)"), "{msg}");
    assert!(
        msg.contains("other") && msg.contains("policy/policy.yaml"),
        "{msg}"
    );

    // By size: the selected files hold 101 bytes.
    let err = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("schema-big", &[]),
        Some(&policy),
    )
    .await
    .err()
    .context("a source above the size is refused")?;
    let msg = err.to_string();
    assert!(msg.contains("rules[0] (configMap.maxSize)"), "{msg}");
    assert!(!msg.contains("xxxx"), "no file content in errors: {msg}");

    // Nothing was written.
    assert!(s.snapshots().await?.is_empty());

    // An admitted source records the policy it was checked against.
    let ok = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("schema-ok", &[]),
        Some(&policy),
    )
    .await?;
    let binding = ok.source_policy.clone().context("policy binding")?;
    assert_eq!(binding.uid, policy_cm.uid().context("policy UID")?);
    assert_eq!(binding.digest, policy_digest(policy_text.as_bytes()));
    assert_eq!(ok.source_status(None).source_policy, Some(binding));
    assert_eq!(s.snapshots().await?, vec![ok.snapshot_name.clone()]);

    // A missing policy, a missing key and a policy that does not parse are
    // clear errors naming it, and write nothing either.
    let missing = ConfigMapKeyRef {
        name: "no-policy".into(),
        key: "policy.yaml".into(),
    };
    let err = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("other", &[]),
        Some(&missing),
    )
    .await
    .err()
    .context("missing policy")?;
    assert!(matches!(err, ResolveError::PolicyMissing { .. }), "{err}");
    assert!(err.to_string().contains("no-policy"), "{err}");
    let wrong_key = ConfigMapKeyRef {
        name: "policy".into(),
        key: "nope.yaml".into(),
    };
    let err = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("other", &[]),
        Some(&wrong_key),
    )
    .await
    .err()
    .context("missing key")?;
    assert!(err.to_string().contains("nope.yaml"), "{err}");
    s.create::<ConfigMap>(
        json!({"metadata": {"name": "bad-policy"}, "data": {"p": "version: 2\n"}}),
    )
    .await?;
    let bad = ConfigMapKeyRef {
        name: "bad-policy".into(),
        key: "p".into(),
    };
    let err = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("schema-ok", &[]),
        Some(&bad),
    )
    .await
    .err()
    .context("bad policy")?;
    assert!(
        err.to_string().contains("bad-policy/p: version: 2"),
        "{err}"
    );
    assert_eq!(s.snapshots().await?, vec![ok.snapshot_name.clone()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_source_or_key_is_a_clear_error() -> anyhow::Result<()> {
    let s = Scope::new("miss").await?;
    let owner = s.schema("orders", "absent", &[]).await?;
    let err = resolve_configmap(s.client(), &owner, &source_spec("absent", &[]), None)
        .await
        .err()
        .context("a missing ConfigMap is an error")?;
    assert!(matches!(err, ResolveError::SourceMissing { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("source ConfigMap {}/absent not found", s.name())
    );
    assert!(!err.is_transient());

    s.create::<ConfigMap>(json!({"metadata": {"name": "present"}, "data": {"001_init.sql": INIT}}))
        .await?;
    let err = resolve_configmap(
        s.client(),
        &owner,
        &source_spec("present", &["001_init.sql", "002_missing.sql"]),
        None,
    )
    .await
    .err()
    .context("a missing key is an error")?;
    assert_eq!(
        err.to_string(),
        "source ConfigMap present: key \"002_missing.sql\": selected but not in the ConfigMap"
    );
    assert!(s.snapshots().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_deleted_or_replaced_no_longer_holds_and_is_never_overwritten()
-> anyhow::Result<()> {
    let s = Scope::new("hold").await?;
    s.create::<ConfigMap>(json!({
        "metadata": {"name": "schema"},
        "data": {"001_init.sql": INIT, "002_users.sql": USERS},
    }))
    .await?;
    let owner = s.schema("orders", "schema", &[]).await?;
    let spec = source_spec("schema", &[]);
    let r = resolve_configmap(s.client(), &owner, &spec, None).await?;
    let hold =
        snapshot_still_holds(s.client(), s.name(), &r.snapshot_name, &r.content_digest).await?;
    assert_eq!(hold, SnapshotHold::Holds);

    // Deleted under the operation.
    let original = s.config_maps().get(&r.snapshot_name).await?;
    s.config_maps()
        .delete(&r.snapshot_name, &DeleteParams::default())
        .await?;
    wait_gone(&s.config_maps(), &r.snapshot_name).await?;
    let hold =
        snapshot_still_holds(s.client(), s.name(), &r.snapshot_name, &r.content_digest).await?;
    assert!(matches!(hold, SnapshotHold::Missing { .. }), "{hold:?}");
    assert!(!hold.holds());
    assert!(
        hold.refusal()
            .is_some_and(|m| m.contains(&r.snapshot_name) && m.contains("refused"))
    );

    // Replaced by one of the same name, owned and immutable as well, whose
    // file no longer gives the digest.
    let mut impostor = original.clone();
    impostor.metadata.uid = None;
    impostor.metadata.resource_version = None;
    impostor.metadata.creation_timestamp = None;
    impostor.metadata.managed_fields = None;
    if let Some(d) = impostor.data.as_mut() {
        d.insert("002_users.sql".into(), "DROP TABLE users;\n".into());
    }
    s.config_maps()
        .create(&PostParams::default(), &impostor)
        .await?;
    let hold =
        snapshot_still_holds(s.client(), s.name(), &r.snapshot_name, &r.content_digest).await?;
    match &hold {
        SnapshotHold::Replaced { reason, .. } => {
            assert!(reason.contains("002_users.sql"), "names the file: {reason}")
        }
        other => bail!("expected Replaced, got {other:?}"),
    }
    assert!(!hold.holds());

    // Resolving again refuses the impostor rather than overwrite or reuse it.
    let err = resolve_configmap(s.client(), &owner, &spec, None)
        .await
        .err()
        .context("a snapshot with other content is refused")?;
    assert!(
        matches!(err, ResolveError::SnapshotConflict { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&r.snapshot_name), "{err}");
    assert!(!err.to_string().contains("DROP TABLE"), "no content: {err}");
    let still = s.config_maps().get(&r.snapshot_name).await?;
    assert_eq!(
        still
            .data
            .as_ref()
            .and_then(|d| d.get("002_users.sql"))
            .map(String::as_str),
        Some("DROP TABLE users;\n")
    );
    assert!(
        still
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key(MANIFEST_KEY))
    );
    Ok(())
}
