//! Resolve for a ConfigMap source, in the manager (no Job): the thin I/O around
//! [`supplychain::snapshot`]. The seed: "the manager reads the ConfigMap from
//! the API server, takes the selected keys as files, and copies them into an
//! immutable snapshot ConfigMap named ptah-src-<hash> that the resource owns".
//!
//! * [`resolve_configmap`] reads the source ConfigMap, checks it against the
//!   source policy (name, size, number of files) **before** anything is
//!   written, and creates the snapshot — or finds it already there and checks
//!   that its files still give the content digest. A snapshot of the same name
//!   with other content is refused, never overwritten. The result maps onto
//!   `status.source` ([`SnapshotResolution::source_status`]) and the lifecycle's
//!   `Observation::SnapshotTaken`.
//! * [`collect_snapshots`] deletes the snapshots a resource owns that nothing
//!   names any more; called after each resolution is stored (also the first
//!   resolution of a Git or OCI source, with nothing named).
//! * [`snapshot_still_holds`] is the pre-dispatch check: a snapshot deleted or
//!   replaced while an operation still needs it refuses that operation.
//!
//! The snapshot ConfigMap:
//!
//! * `immutable: true`; owned by the resource with `controller: true` (the
//!   resource's controller is its only writer, so a `Controller::owns` watch
//!   wakes the resource when a snapshot is deleted) and
//!   `blockOwnerDeletion: false` (blocking would need update rights on the
//!   owner's finalizers, and nothing is lost by deleting the owner first: the
//!   garbage collector removes the snapshots after it).
//! * Labels: `app.kubernetes.io/managed-by: ptah-operator`,
//!   `app.kubernetes.io/component: source-snapshot`, [`LABEL_OWNER_UID`] (the
//!   owner's UID: what [`collect_snapshots`] selects on; a UID always fits a
//!   label value, a name may not) and `operator.ptah.run/schema` or
//!   `operator.ptah.run/migration` naming the owner when its name fits a label.
//! * Annotations: the content digest, the source ConfigMap's name and UID.
//!
//! File contents are never logged or put in an error: errors name the
//! ConfigMap, the key, the snapshot or the policy rule.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Client, Resource, ResourceExt};
use supplychain::manifest::Limits;
use supplychain::snapshot::{self as pure, NAME_PREFIX, SourceConfigMap};
use supplychain::source_policy::{PolicyError, Refusal, SourcePolicy, policy_digest};

use crate::api::annotations::{MIGRATION_LABEL, SCHEMA_LABEL};
use crate::api::common::ConfigMapKeyRef;
use crate::api::source::{
    ConfigMapResolution, ConfigMapSource, PolicyBinding, SourceKind, SourceStatus,
};
use crate::execution::job::{
    ANNOTATION_CONTENT_DIGEST, LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY,
};

/// `app.kubernetes.io/component` of a snapshot.
pub const COMPONENT: &str = "source-snapshot";
// The names live with every other label and annotation name.
pub use crate::api::annotations::{ANNOTATION_SOURCE_NAME, ANNOTATION_SOURCE_UID, LABEL_OWNER_UID};

/// The resource a snapshot belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// `operator.ptah.run/v1alpha1`.
    pub api_version: String,
    /// `PtahSchema` or `PtahMigration`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace: the source ConfigMap, the policy and the snapshot live here.
    pub namespace: String,
    /// UID: bound into the snapshot's name and its owner reference.
    pub uid: String,
}

impl Owner {
    /// The owner of a stored object (one with a namespace and a UID).
    pub fn of<K: Resource<DynamicType = ()>>(obj: &K) -> Result<Owner, ResolveError> {
        let (Some(namespace), Some(uid)) = (obj.namespace(), obj.meta().uid.clone()) else {
            return Err(ResolveError::NotStored {
                name: obj.name_any(),
            });
        };
        Ok(Owner {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            name: obj.name_any(),
            namespace,
            uid,
        })
    }

    /// The owner reference every snapshot carries (see the module doc).
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        }
    }

    /// Whether `cm` is owned by this resource.
    fn owns(&self, cm: &ConfigMap) -> bool {
        cm.owner_references().iter().any(|r| r.uid == self.uid)
    }
}

/// Why a ConfigMap source is not resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The owner has no namespace or UID (not read from the API server).
    #[error("{name}: the owning resource has no namespace or UID")]
    NotStored {
        /// The owner's name.
        name: String,
    },
    /// The source ConfigMap does not exist.
    #[error("source ConfigMap {namespace}/{name} not found")]
    SourceMissing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The selected keys do not give a snapshot (a missing or invalid key,
    /// too large).
    #[error("source ConfigMap {name}: {source}")]
    Source {
        /// The source ConfigMap.
        name: String,
        /// Why; names the key.
        #[source]
        source: pure::SnapshotError,
    },
    /// The source policy ConfigMap does not exist.
    #[error("source policy ConfigMap {namespace}/{name} not found")]
    PolicyMissing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The source policy ConfigMap lacks the key.
    #[error("source policy ConfigMap {name}: key {key:?} not found")]
    PolicyKeyMissing {
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
    /// The source policy does not load.
    #[error("source policy {name}/{key}: {source}")]
    PolicyInvalid {
        /// The policy ConfigMap.
        name: String,
        /// The key.
        key: String,
        /// Why; names the field.
        #[source]
        source: PolicyError,
    },
    /// The source policy refuses the source; the message names the rule.
    #[error("source ConfigMap {name} refused by source policy {policy}: {refusal}")]
    Refused {
        /// The source ConfigMap.
        name: String,
        /// The policy, `<ConfigMap>/<key>`.
        policy: String,
        /// The rule and why.
        refusal: Refusal,
    },
    /// A ConfigMap of the snapshot's name exists and is not this snapshot.
    #[error("snapshot {name}: exists and {reason}; refused, not overwritten")]
    SnapshotConflict {
        /// The snapshot's name.
        name: String,
        /// What differs.
        reason: String,
    },
    /// The snapshot of this name is being deleted (a collection raced this
    /// resolution); the next resolution writes it again.
    #[error("snapshot {name}: being deleted; resolve again once it is gone")]
    SnapshotDeleting {
        /// The snapshot's name.
        name: String,
    },
    /// The API server failed; worth retrying.
    #[error("{what}: {source}")]
    Api {
        /// The request.
        what: String,
        /// The error.
        #[source]
        source: Box<kube::Error>,
    },
}

impl ResolveError {
    /// Whether this is the API server failing (retry later) rather than the
    /// source or its policy being refused (report as `SourceRefused`, the
    /// message naming the ConfigMap, key or rule).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ResolveError::Api { .. } | ResolveError::SnapshotDeleting { .. }
        )
    }

    fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ResolveError {
        let what = what.into();
        move |source| ResolveError::Api {
            what,
            source: Box::new(source),
        }
    }
}

/// A ConfigMap source resolved: the snapshot exists and holds the files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotResolution {
    /// Name of the source ConfigMap.
    pub config_map_name: String,
    /// UID of the source ConfigMap.
    pub config_map_uid: String,
    /// `ptah-src-<hash>`.
    pub snapshot_name: String,
    /// UID of the snapshot ConfigMap.
    pub snapshot_uid: Option<String>,
    /// `sha256:<hex>` of the manifest.
    pub content_digest: String,
    /// Number of files in the snapshot.
    pub files: usize,
    /// Total size of the files, in bytes.
    pub size: u64,
    /// The source policy the source was checked against.
    pub source_policy: Option<PolicyBinding>,
    /// Whether this resolution wrote the snapshot (false: it existed).
    pub created: bool,
}

impl SnapshotResolution {
    /// `<configmap>@sha256:<content digest>`.
    pub fn revision(&self) -> String {
        format!("{}@{}", self.config_map_name, self.content_digest)
    }

    /// `status.source` for this resolution.
    pub fn source_status(&self, resolved_at: Option<Time>) -> SourceStatus {
        SourceStatus {
            kind: SourceKind::ConfigMap,
            revision: self.revision(),
            content_digest: self.content_digest.clone(),
            resolved_at,
            config_map: Some(ConfigMapResolution {
                name: self.config_map_name.clone(),
                uid: self.config_map_uid.clone(),
                snapshot_name: self.snapshot_name.clone(),
                snapshot_uid: self.snapshot_uid.clone(),
            }),
            git: None,
            oci: None,
            flux: None,
            source_policy: self.source_policy.clone(),
            verification: None,
        }
    }
}

/// The keys of a ConfigMap as the pure layer reads them.
fn source_of(cm: &ConfigMap) -> SourceConfigMap {
    SourceConfigMap {
        data: cm.data.clone().unwrap_or_default(),
        binary_data: cm
            .binary_data
            .as_ref()
            .map(|b| b.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default(),
    }
}

/// Every key of a ConfigMap with its bytes (`data` and `binaryData`).
fn keys_of(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let src = source_of(cm);
    let mut keys: BTreeMap<String, Vec<u8>> = src
        .data
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    keys.extend(src.binary_data);
    keys
}

/// Reads the source policy a ConfigMap source names: its binding and rules.
async fn read_policy(
    api: &Api<ConfigMap>,
    namespace: &str,
    policy: &ConfigMapKeyRef,
) -> Result<(PolicyBinding, SourcePolicy), ResolveError> {
    let cm = api
        .get_opt(&policy.name)
        .await
        .map_err(ResolveError::api(format!(
            "reading source policy ConfigMap {}",
            policy.name
        )))?
        .ok_or_else(|| ResolveError::PolicyMissing {
            namespace: namespace.to_string(),
            name: policy.name.clone(),
        })?;
    let bytes = keys_of(&cm)
        .remove(&policy.key)
        .ok_or_else(|| ResolveError::PolicyKeyMissing {
            name: policy.name.clone(),
            key: policy.key.clone(),
        })?;
    let parsed = SourcePolicy::parse(&bytes).map_err(|source| ResolveError::PolicyInvalid {
        name: policy.name.clone(),
        key: policy.key.clone(),
        source,
    })?;
    let binding = PolicyBinding {
        name: policy.name.clone(),
        key: policy.key.clone(),
        uid: cm.metadata.uid.clone().unwrap_or_default(),
        digest: policy_digest(&bytes),
    };
    Ok((binding, parsed))
}

/// The snapshot ConfigMap for `snap` (see the module doc for the metadata).
pub fn snapshot_object(
    owner: &Owner,
    source_name: &str,
    source_uid: &str,
    snap: &pure::Snapshot,
) -> ConfigMap {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_COMPONENT.to_string(), COMPONENT.to_string()),
        (LABEL_OWNER_UID.to_string(), owner.uid.clone()),
    ]);
    let name_label = match owner.kind.as_str() {
        "PtahSchema" => Some(SCHEMA_LABEL),
        "PtahMigration" => Some(MIGRATION_LABEL),
        _ => None,
    };
    // A name of at most 63 characters (a DNS subdomain) is a valid label value.
    if let Some(label) = name_label
        && owner.name.len() <= 63
    {
        labels.insert(label.to_string(), owner.name.clone());
    }
    let binary = snap.binary_data();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(snap.name.clone()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (
                    ANNOTATION_CONTENT_DIGEST.to_string(),
                    snap.content_digest.clone(),
                ),
                (ANNOTATION_SOURCE_NAME.to_string(), source_name.to_string()),
                (ANNOTATION_SOURCE_UID.to_string(), source_uid.to_string()),
            ])),
            owner_references: Some(vec![owner.owner_reference()]),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        data: Some(snap.data()),
        binary_data: (!binary.is_empty()).then(|| {
            binary
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect()
        }),
    }
}

/// Why an existing ConfigMap is not the snapshot an owner expects, or `None`
/// when it is: owned by the owner, immutable, and its files give the digest.
fn mismatch(owner: &Owner, cm: &ConfigMap, expected_digest: &str) -> Option<String> {
    if !owner.owns(cm) {
        return Some(format!("is not owned by {} {}", owner.kind, owner.name));
    }
    if cm.immutable != Some(true) {
        return Some("is not immutable".to_string());
    }
    content_mismatch(cm, expected_digest)
}

/// Why a snapshot's files do not give `expected_digest`, naming the file.
fn content_mismatch(cm: &ConfigMap, expected_digest: &str) -> Option<String> {
    pure::check_files(&keys_of(cm), expected_digest, &Limits::default())
        .err()
        .map(|e| format!("does not give content digest {expected_digest}: {e}"))
}

/// Resolves a ConfigMap source for `owner`: reads the ConfigMap, checks it
/// against the source policy (when one is named) before anything is written,
/// and creates the immutable snapshot or verifies the existing one.
pub async fn resolve_configmap(
    client: &Client,
    owner: &Owner,
    source: &ConfigMapSource,
    source_policy: Option<&ConfigMapKeyRef>,
) -> Result<SnapshotResolution, ResolveError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &owner.namespace);
    let policy = match source_policy {
        Some(p) => Some(read_policy(&api, &owner.namespace, p).await?),
        None => None,
    };
    let cm = api
        .get_opt(&source.name)
        .await
        .map_err(ResolveError::api(format!(
            "reading source ConfigMap {}",
            source.name
        )))?
        .ok_or_else(|| ResolveError::SourceMissing {
            namespace: owner.namespace.clone(),
            name: source.name.clone(),
        })?;
    let source_uid = cm.metadata.uid.clone().unwrap_or_default();
    let as_read = source_of(&cm);
    let source_err = |error: pure::SnapshotError| ResolveError::Source {
        name: source.name.clone(),
        source: error,
    };
    let files = pure::select_files(&as_read, &source.keys).map_err(source_err)?;
    let size: u64 = files.values().map(|v| v.len() as u64).sum();
    if let Some((binding, rules)) = &policy {
        rules
            .check_config_map(&source.name, size, files.len() as u64)
            .map_err(|refusal| ResolveError::Refused {
                name: source.name.clone(),
                policy: format!("{}/{}", binding.name, binding.key),
                refusal,
            })?;
    }
    let snap =
        pure::take(&as_read, &source.keys, &owner.uid, &Limits::default()).map_err(source_err)?;

    let (stored, created) = store(&api, owner, &source.name, &source_uid, &snap).await?;
    Ok(SnapshotResolution {
        config_map_name: source.name.clone(),
        config_map_uid: source_uid,
        snapshot_name: snap.name.clone(),
        snapshot_uid: stored.metadata.uid.clone(),
        content_digest: snap.content_digest.clone(),
        files: snap.files.len(),
        size: snap.manifest.total_size(),
        source_policy: policy.map(|(binding, _)| binding),
        created,
    })
}

/// Writes the immutable snapshot `snap` for `owner`, or checks the one that
/// exists: the stored object, and whether this call created it.
async fn store(
    api: &Api<ConfigMap>,
    owner: &Owner,
    source_name: &str,
    source_uid: &str,
    snap: &pure::Snapshot,
) -> Result<(ConfigMap, bool), ResolveError> {
    // Read first: on most passes the snapshot exists, and a read is cheaper
    // than a create refused with 409.
    let read = |what: &'static str| ResolveError::api(format!("{what} snapshot {}", snap.name));
    let (stored, created) = match api.get_opt(&snap.name).await.map_err(read("reading"))? {
        Some(existing) => (existing, false),
        None => {
            let object = snapshot_object(owner, source_name, source_uid, snap);
            match api.create(&PostParams::default(), &object).await {
                Ok(stored) => (stored, true),
                // Another pass wrote it meanwhile: check what it wrote.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let existing = api.get_opt(&snap.name).await.map_err(read("reading"))?;
                    let existing = existing.ok_or_else(|| ResolveError::SnapshotDeleting {
                        name: snap.name.clone(),
                    })?;
                    (existing, false)
                }
                Err(e) => return Err(read("creating")(e)),
            }
        }
    };
    if !created {
        if stored.metadata.deletion_timestamp.is_some() {
            return Err(ResolveError::SnapshotDeleting {
                name: snap.name.clone(),
            });
        }
        if let Some(reason) = mismatch(owner, &stored, &snap.content_digest) {
            return Err(ResolveError::SnapshotConflict {
                name: snap.name.clone(),
                reason,
            });
        }
    }
    Ok((stored, created))
}

/// Snapshots files a Resolve Job fetched (a Flux artifact's), for `owner`,
/// naming where they came from: the snapshot's name and UID. The files'
/// content digest must be `expected_digest`, what the Job reported.
pub async fn snapshot_fetched(
    client: &Client,
    owner: &Owner,
    source_name: &str,
    source_uid: &str,
    files: BTreeMap<String, Vec<u8>>,
    expected_digest: &str,
) -> Result<(String, Option<String>), ResolveError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &owner.namespace);
    let as_fetched = SourceConfigMap {
        data: BTreeMap::new(),
        binary_data: files,
    };
    let source_err = |error: pure::SnapshotError| ResolveError::Source {
        name: source_name.to_string(),
        source: error,
    };
    let snap = pure::take(&as_fetched, &[], &owner.uid, &Limits::default()).map_err(source_err)?;
    if snap.content_digest != expected_digest {
        return Err(ResolveError::SnapshotConflict {
            name: snap.name.clone(),
            reason: format!(
                "the fetched files give {} where the Resolve Job reported {expected_digest}",
                snap.content_digest
            ),
        });
    }
    let (stored, _) = store(&api, owner, source_name, source_uid, &snap).await?;
    Ok((snap.name, stored.metadata.uid))
}

/// The source ConfigMap as it is now, without writing anything: its UID and
/// the content digest its selected files give. The controller compares it
/// with the recorded resolution to notice an edit at once.
pub async fn current_content(
    client: &Client,
    namespace: &str,
    source: &ConfigMapSource,
) -> Result<(String, String), ResolveError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(&source.name)
        .await
        .map_err(ResolveError::api(format!(
            "reading source ConfigMap {}",
            source.name
        )))?
        .ok_or_else(|| ResolveError::SourceMissing {
            namespace: namespace.to_string(),
            name: source.name.clone(),
        })?;
    // The owner only names the snapshot; any non-empty value gives the digest.
    let snap =
        pure::take(&source_of(&cm), &source.keys, "-", &Limits::default()).map_err(|error| {
            ResolveError::Source {
                name: source.name.clone(),
                source: error,
            }
        })?;
    Ok((
        cm.metadata.uid.clone().unwrap_or_default(),
        snap.content_digest,
    ))
}

/// Deletes the snapshots `owner` owns whose names are not in `still_named`;
/// returns the names deleted. Call after a resolution is stored, with every
/// snapshot the resource still names (`status.source`, plans, a claim); after
/// the first resolution of a Git or OCI source that is none.
pub async fn collect_snapshots(
    client: &Client,
    owner: &Owner,
    still_named: &[String],
) -> Result<Vec<String>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &owner.namespace);
    let owned = api
        .list_metadata(&ListParams::default().labels(&format!("{LABEL_OWNER_UID}={}", owner.uid)))
        .await?;
    let owned = owned.items.into_iter().map(|m| m.metadata);
    collect_snapshots_among(client, owner, still_named, owned).await
}

/// [`collect_snapshots`] among `candidates`, the metadata of ConfigMaps in
/// the owner's namespace (a watch's store, rather than a LIST).
pub async fn collect_snapshots_among(
    client: &Client,
    owner: &Owner,
    still_named: &[String],
    candidates: impl IntoIterator<Item = ObjectMeta>,
) -> Result<Vec<String>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &owner.namespace);
    let keep: BTreeSet<&str> = still_named.iter().map(String::as_str).collect();
    let mut deleted = Vec::new();
    for meta in candidates {
        let name = meta.name.clone().unwrap_or_default();
        let labelled = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_OWNER_UID))
            .is_some_and(|uid| *uid == owner.uid);
        let owned = meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == owner.uid);
        if !labelled || !name.starts_with(NAME_PREFIX) || !owned || keep.contains(name.as_str()) {
            continue;
        }
        // Only the object listed: one recreated meanwhile is left alone.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: meta.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &params).await {
            Ok(_) => deleted.push(name),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Whether a snapshot still holds what an operation was bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotHold {
    /// It exists and its files give the bound content digest.
    Holds,
    /// It is gone.
    Missing {
        /// The snapshot's name.
        name: String,
    },
    /// It exists with other content.
    Replaced {
        /// The snapshot's name.
        name: String,
        /// What differs, naming the file.
        reason: String,
    },
}

impl SnapshotHold {
    /// Whether the operation may be dispatched.
    pub fn holds(&self) -> bool {
        matches!(self, SnapshotHold::Holds)
    }

    /// Why the operation is refused, or `None` when it holds.
    pub fn refusal(&self) -> Option<String> {
        match self {
            SnapshotHold::Holds => None,
            SnapshotHold::Missing { name } => Some(format!(
                "snapshot {name} is gone; the operation bound to it is refused"
            )),
            SnapshotHold::Replaced { name, reason } => Some(format!(
                "snapshot {name} {reason}; the operation bound to it is refused"
            )),
        }
    }
}

/// The pre-dispatch check: whether the snapshot `name` still exists and its
/// files (against its own manifest) give `expected_digest`.
pub async fn snapshot_still_holds(
    client: &Client,
    namespace: &str,
    name: &str,
    expected_digest: &str,
) -> Result<SnapshotHold, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let found = api.get_opt(name).await?;
    // One being deleted is as good as gone.
    let Some(cm) = found.filter(|c| c.metadata.deletion_timestamp.is_none()) else {
        return Ok(SnapshotHold::Missing {
            name: name.to_string(),
        });
    };
    Ok(match content_mismatch(&cm, expected_digest) {
        None => SnapshotHold::Holds,
        Some(reason) => SnapshotHold::Replaced {
            name: name.to_string(),
            reason,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use supplychain::snapshot::MANIFEST_KEY;

    fn owner() -> Owner {
        Owner {
            api_version: "operator.ptah.run/v1alpha1".into(),
            kind: "PtahSchema".into(),
            name: "orders".into(),
            namespace: "shop".into(),
            uid: "7c0a4a5e-1111-4222-8333-444455556666".into(),
        }
    }

    fn snap() -> pure::Snapshot {
        let src = SourceConfigMap {
            data: BTreeMap::from([("schema.sql".into(), "CREATE TABLE a (id int);\n".into())]),
            binary_data: BTreeMap::from([("blob.bin".into(), vec![0xff, 0])]),
        };
        pure::take(&src, &[], &owner().uid, &Limits::default()).expect("snapshot")
    }

    #[test]
    fn resolution_maps_onto_status_source() {
        let r = SnapshotResolution {
            config_map_name: "orders-schema".into(),
            config_map_uid: "cm-uid".into(),
            snapshot_name: "ptah-src-0123".into(),
            snapshot_uid: Some("snap-uid".into()),
            content_digest: format!("sha256:{}", "ab".repeat(32)),
            files: 1,
            size: 10,
            source_policy: Some(PolicyBinding {
                name: "policy".into(),
                key: "policy.yaml".into(),
                uid: "p-uid".into(),
                digest: format!("sha256:{}", "cd".repeat(32)),
            }),
            created: true,
        };
        let st = r.source_status(None);
        assert_eq!(st.kind, SourceKind::ConfigMap);
        assert_eq!(
            st.revision,
            format!("orders-schema@sha256:{}", "ab".repeat(32))
        );
        assert_eq!(st.content_digest, r.content_digest);
        let cm = st.config_map.as_ref().expect("configMap");
        assert_eq!(
            (cm.name.as_str(), cm.uid.as_str(), cm.snapshot_name.as_str()),
            ("orders-schema", "cm-uid", "ptah-src-0123")
        );
        assert_eq!(cm.snapshot_uid.as_deref(), Some("snap-uid"));
        assert_eq!(st.source_policy, r.source_policy);
        assert!(st.git.is_none() && st.oci.is_none() && st.verification.is_none());
        // What a claim and a plan bind from it.
        let b = crate::api::status::binding_of(&st);
        assert_eq!(b.config_map_uid.as_deref(), Some("cm-uid"));
        assert_eq!(b.snapshot_name.as_deref(), Some("ptah-src-0123"));
        assert_eq!(b.source_policy_uid.as_deref(), Some("p-uid"));
    }

    #[test]
    fn snapshot_object_is_immutable_owned_labelled_and_checkable() {
        let s = snap();
        let cm = snapshot_object(&owner(), "orders-schema", "cm-uid", &s);
        assert_eq!(cm.immutable, Some(true));
        assert_eq!(cm.metadata.name.as_deref(), Some(s.name.as_str()));
        let refs = cm.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].uid, owner().uid);
        assert_eq!(refs[0].controller, Some(true));
        assert_eq!(refs[0].block_owner_deletion, Some(false));
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
        assert_eq!(labels[LABEL_OWNER_UID], owner().uid);
        assert_eq!(labels[SCHEMA_LABEL], "orders");
        let ann = cm.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(ann[ANNOTATION_CONTENT_DIGEST], s.content_digest);
        assert_eq!(ann[ANNOTATION_SOURCE_UID], "cm-uid");
        assert!(
            cm.data
                .as_ref()
                .is_some_and(|d| d.contains_key(MANIFEST_KEY))
        );
        assert!(
            cm.binary_data
                .as_ref()
                .is_some_and(|d| d.contains_key("blob.bin"))
        );
        // What the API server stores, read back, checks against the digest.
        assert_eq!(mismatch(&owner(), &cm, &s.content_digest), None);
        assert!(mismatch(&owner(), &cm, &format!("sha256:{}", "00".repeat(32))).is_some());
        let mut other = owner();
        other.uid = "other".into();
        assert!(mismatch(&other, &cm, &s.content_digest).is_some_and(|r| r.contains("not owned")));
        let mut mutable = cm.clone();
        mutable.immutable = None;
        assert_eq!(
            mismatch(&owner(), &mutable, &s.content_digest).as_deref(),
            Some("is not immutable")
        );
    }

    #[test]
    fn a_long_owner_name_gets_no_name_label() {
        let mut o = owner();
        o.name = "a".repeat(64);
        o.kind = "PtahMigration".into();
        let cm = snapshot_object(&o, "src", "uid", &snap());
        let labels = cm.metadata.labels.unwrap_or_default();
        assert!(!labels.contains_key(MIGRATION_LABEL));
        assert!(labels.contains_key(LABEL_OWNER_UID));
    }

    #[test]
    fn refusals_read_as_the_rule_and_hold_no_content() {
        let hold = SnapshotHold::Missing {
            name: "ptah-src-1".into(),
        };
        assert!(!hold.holds());
        assert!(hold.refusal().is_some_and(|m| m.contains("ptah-src-1")));
        assert_eq!(SnapshotHold::Holds.refusal(), None);
        let e = ResolveError::SourceMissing {
            namespace: "shop".into(),
            name: "orders-schema".into(),
        };
        assert_eq!(
            e.to_string(),
            "source ConfigMap shop/orders-schema not found"
        );
        assert!(!e.is_transient());
    }
}
