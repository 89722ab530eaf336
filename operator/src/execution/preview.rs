//! Plan previews (`kubectl ptah preview`): a resource's read-only Plan (a
//! PtahSchema's) or History reading (a PtahMigration's) run against its live
//! database from files a person has locally, before they are merged. Pure;
//! the manager's side is `controller/preview.rs`, the receiver's is
//! [`check`].
//!
//! * **The request** is a ConfigMap the plugin creates ([`config_map`]):
//!   labelled [`PREVIEW_LABEL`]`: "true"`, annotated with the resource
//!   ([`ANNOTATION_PREVIEW_OF`], [`ANNOTATION_PREVIEW_UID`]) and the files'
//!   content digest, holding the files and their manifest in the snapshot
//!   format, immutable. It is never the resource's source and never a
//!   snapshot: nothing names it, no resource owns it, and no plan binds it.
//! * **The Job** is the resource's own Plan or History Job (its execution
//!   settings, database, dev database, exclusions, images), built by the
//!   same builder from a claim of its own that no status holds, under the
//!   preview's own operation id ([`operation_id`]),
//!   with the preview ConfigMap mounted where a snapshot would be. It is
//!   owned by the preview ConfigMap (deleting the preview deletes the Job,
//!   its Pod and its stored result), labelled [`COMPONENT`] and without the
//!   resource's label, so the resource's own sweep never meets it
//!   ([`job`]). It takes no realm Lease: nothing it runs writes.
//! * **The result** is stored by the receiver, owned by the Job, once
//!   [`check`] finds the Job and the preview naming the operation. No status,
//!   plan object or approval is written, so nothing can approve a preview.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use supplychain::snapshot::Snapshot;

pub use crate::api::annotations::{
    ANNOTATION_PREVIEW_OF, ANNOTATION_PREVIEW_REFUSED, ANNOTATION_PREVIEW_UID, PREVIEW_LABEL,
};
use crate::api::annotations::{MIGRATION_LABEL, SCHEMA_LABEL};
use crate::api::source::{ConfigMapSource, Source};
use crate::api::status::{OperationType, SourceBinding};
use crate::execution::job::{
    ANNOTATION_ATTEMPT, ANNOTATION_CONTENT_DIGEST, ANNOTATION_OPERATION_ID, LABEL_COMPONENT,
    OwnerKind,
};
use crate::protocol::result::OperationRef;

/// `app.kubernetes.io/component` of a preview's Job and Pod.
pub const COMPONENT: &str = "plan-preview";
/// Prefix of a preview ConfigMap's (generated) name and of its Job's name.
pub const NAME_PREFIX: &str = "ptah-preview-";

/// A preview request, as read from its ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The preview ConfigMap's name.
    pub name: String,
    /// Its namespace: the resource's.
    pub namespace: String,
    /// Its UID: the Job's owner, and what the operation id binds.
    pub uid: String,
    /// The resource's kind.
    pub kind: OwnerKind,
    /// The resource's name.
    pub resource: String,
    /// The resource's UID as the plugin read it.
    pub resource_uid: String,
    /// `sha256:` of the files' manifest.
    pub content_digest: String,
    /// When the preview was made: the claim's instant.
    pub created: Time,
}

/// Why a ConfigMap is not a preview the manager can run: names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Refused {
    /// The field or rule.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

fn refused(field: impl Into<String>, reason: impl Into<String>) -> Refused {
    Refused {
        field: field.into(),
        reason: reason.into(),
    }
}

/// `PtahSchema/<name>` or `PtahMigration/<name>`.
pub fn preview_of(kind: OwnerKind, resource: &str) -> String {
    format!("{}/{resource}", kind.kind())
}

/// What a preview runs: a schema's Plan, a migration's History reading.
pub fn operation(kind: OwnerKind) -> OperationType {
    match kind {
        OwnerKind::PtahSchema => OperationType::Plan,
        OwnerKind::PtahMigration => OperationType::History,
    }
}

/// Whether `cm` asks for a preview (its label), whatever else it holds.
pub fn is_preview(cm: &ConfigMap) -> bool {
    cm.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PREVIEW_LABEL))
        .is_some_and(|v| v == "true")
}

/// Reads a preview ConfigMap; each refusal names the annotation or field.
pub fn request_of(cm: &ConfigMap) -> Result<Request, Refused> {
    let m = &cm.metadata;
    let annotation = |key: &str| {
        m.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| refused(format!("metadata.annotations[{key}]"), "is required"))
    };
    let of = annotation(ANNOTATION_PREVIEW_OF)?;
    let (kind, resource) = match of.split_once('/') {
        Some(("PtahSchema", name)) => (OwnerKind::PtahSchema, name),
        Some(("PtahMigration", name)) => (OwnerKind::PtahMigration, name),
        _ => {
            return Err(refused(
                format!("metadata.annotations[{ANNOTATION_PREVIEW_OF}]"),
                format!("{of:?} is not PtahSchema/<name> or PtahMigration/<name>"),
            ));
        }
    };
    if resource.is_empty() || resource.contains('/') {
        return Err(refused(
            format!("metadata.annotations[{ANNOTATION_PREVIEW_OF}]"),
            format!("{of:?} names no resource"),
        ));
    }
    let content_digest = annotation(ANNOTATION_CONTENT_DIGEST)?;
    if crate::protocol::naming::sha256_hex(&content_digest).is_none() {
        return Err(refused(
            format!("metadata.annotations[{ANNOTATION_CONTENT_DIGEST}]"),
            "must be sha256:<64 hex>",
        ));
    }
    let missing = |field: &str| refused(field.to_string(), "is required");
    Ok(Request {
        name: m.name.clone().ok_or_else(|| missing("metadata.name"))?,
        namespace: m
            .namespace
            .clone()
            .ok_or_else(|| missing("metadata.namespace"))?,
        uid: m.uid.clone().ok_or_else(|| missing("metadata.uid"))?,
        kind,
        resource: resource.to_string(),
        resource_uid: annotation(ANNOTATION_PREVIEW_UID)?,
        content_digest,
        created: m
            .creation_timestamp
            .clone()
            .ok_or_else(|| missing("metadata.creationTimestamp"))?,
    })
}

/// The preview's files as a source: the preview ConfigMap, all its keys.
pub fn source(r: &Request) -> Source {
    Source {
        config_map: Some(ConfigMapSource {
            name: r.name.clone(),
            keys: Vec::new(),
        }),
        git: None,
        oci: None,
        flux: None,
        source_policy_from: None,
        verification_policy_from: None,
    }
}

/// What the preview's claim binds: its own files, mounted as a snapshot.
pub fn binding(r: &Request) -> SourceBinding {
    SourceBinding::of_config_map(
        r.content_digest.clone(),
        Some(r.uid.clone()),
        Some(r.name.clone()),
    )
}

/// The preview's operation id: its UID and instant, so the same preview
/// always names the same Job and two previews never share one.
pub fn operation_id(r: &Request) -> String {
    let when = r.created.0.to_string();
    let text = format!("ptah-preview v1\n{}\n{when}\n", r.uid);
    crate::execution::plan::content_digest(text.as_bytes())
}

/// `ptah-preview-<16 hex of the operation id>`.
pub fn job_name(operation_id: &str) -> String {
    let short = crate::protocol::naming::short_id(operation_id);
    format!("{NAME_PREFIX}{short}")
}

/// The resource's Job for the preview's claim, made the preview's: its
/// name, owned by the preview ConfigMap, labelled a preview and not the
/// resource's.
pub fn job(r: &Request, mut built: Job, operation_id: &str) -> Job {
    fn relabel(labels: &mut BTreeMap<String, String>, preview: &str) {
        labels.insert(LABEL_COMPONENT.to_string(), COMPONENT.to_string());
        labels.remove(SCHEMA_LABEL);
        labels.remove(MIGRATION_LABEL);
        labels.insert(PREVIEW_LABEL.to_string(), preview.to_string());
    }
    let m = &mut built.metadata;
    m.name = Some(job_name(operation_id));
    relabel(m.labels.get_or_insert_default(), &r.name);
    m.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: r.name.clone(),
        uid: r.uid.clone(),
        controller: Some(true),
        // Blocking would need update rights on the preview's finalizers.
        block_owner_deletion: None,
    }]);
    if let Some(t) = built
        .spec
        .as_mut()
        .and_then(|s| s.template.metadata.as_mut())
    {
        relabel(t.labels.get_or_insert_default(), &r.name);
    }
    built
}

/// The receiver's check of a preview's result: the Pod's Job is a preview
/// Job of this operation and attempt, owned by the preview ConfigMap, which
/// names the resource and UID the document names. `Err` says what differs.
pub fn check(op: &OperationRef, job: &Job, preview: &ConfigMap) -> Result<(), String> {
    let jm = &job.metadata;
    let label = |k: &str| jm.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let annotation = |k: &str| jm.annotations.as_ref().and_then(|a| a.get(k)).cloned();
    if label(LABEL_COMPONENT).as_deref() != Some(COMPONENT) {
        return Err("the Pod's Job is not a preview's".into());
    }
    if annotation(ANNOTATION_OPERATION_ID).as_deref() != Some(op.operation_id.as_str())
        || annotation(ANNOTATION_ATTEMPT) != Some(op.attempt.to_string())
    {
        return Err("operation.operationId is not the preview Job's operation".into());
    }
    let owner = jm
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "ConfigMap");
    let owned = owner.is_some_and(|o| {
        Some(o.name.as_str()) == preview.metadata.name.as_deref()
            && Some(o.uid.as_str()) == preview.metadata.uid.as_deref()
    });
    if !owned || !is_preview(preview) {
        return Err("the preview Job is not owned by a preview ConfigMap".into());
    }
    let r = request_of(preview).map_err(|e| e.to_string())?;
    if op.resource.kind != r.kind.kind()
        || op.resource.name != r.resource
        || op.resource.namespace != r.namespace
        || op.resource_uid != r.resource_uid
    {
        return Err("operation.resource is not the resource the preview names".into());
    }
    if operation_id(&r) != op.operation_id {
        return Err("operation.operationId is not the preview's".into());
    }
    Ok(())
}

/// The preview ConfigMap the plugin creates for `files` (its name
/// generated): the snapshot format, so the Job's source step checks the
/// files against the digest before the database container starts.
pub fn config_map(
    namespace: &str,
    kind: OwnerKind,
    resource: &str,
    resource_uid: &str,
    files: &Snapshot,
) -> ConfigMap {
    let binary = files.binary_data();
    ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some(NAME_PREFIX.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                PREVIEW_LABEL.to_string(),
                "true".to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    ANNOTATION_PREVIEW_OF.to_string(),
                    preview_of(kind, resource),
                ),
                (ANNOTATION_PREVIEW_UID.to_string(), resource_uid.to_string()),
                (
                    ANNOTATION_CONTENT_DIGEST.to_string(),
                    files.content_digest.clone(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        data: Some(files.data()),
        binary_data: (!binary.is_empty()).then(|| {
            binary
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::annotations::LABEL_MANAGED_BY;
    use crate::protocol::args::ResourceRef;
    use supplychain::manifest::Limits;
    use supplychain::snapshot::{SourceConfigMap, take};

    fn files() -> Snapshot {
        let source = SourceConfigMap {
            data: BTreeMap::from([("schema.sql".into(), "CREATE TABLE t (id int);".into())]),
            binary_data: BTreeMap::new(),
        };
        take(&source, &[], "preview", &Limits::default()).expect("a snapshot")
    }

    /// The plugin's ConfigMap as the API server stores it.
    fn stored(kind: OwnerKind) -> ConfigMap {
        let mut cm = config_map("shop", kind, "orders", "res-uid", &files());
        cm.metadata.name = Some("ptah-preview-abcde".into());
        cm.metadata.uid = Some("preview-uid".into());
        cm.metadata.creation_timestamp =
            Some(Time("2026-12-06T08:00:00Z".parse().expect("an instant")));
        cm
    }

    fn op_of(r: &Request) -> OperationRef {
        OperationRef {
            operation_id: operation_id(r),
            attempt: 1,
            resource: ResourceRef {
                kind: r.kind.kind(),
                namespace: r.namespace.clone(),
                name: r.resource.clone(),
            },
            resource_uid: r.resource_uid.clone(),
            generation: 1,
            input_fingerprint: format!("sha256:{}", "f".repeat(64)),
            pod_name: None,
            pod_uid: None,
            job_uid: None,
        }
    }

    fn built_job(r: &Request) -> Job {
        let id = operation_id(r);
        let mut meta = ObjectMeta {
            name: Some("ptah-plan-orders-0123456789abcdef".into()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_string(), "ptah-operator".to_string()),
                (LABEL_COMPONENT.to_string(), "schema-operation".to_string()),
                (SCHEMA_LABEL.to_string(), "orders".to_string()),
            ])),
            annotations: Some(BTreeMap::from([
                (ANNOTATION_OPERATION_ID.to_string(), id.clone()),
                (ANNOTATION_ATTEMPT.to_string(), "1".to_string()),
            ])),
            ..ObjectMeta::default()
        };
        meta.owner_references = Some(vec![OwnerReference {
            kind: "PtahSchema".into(),
            name: "orders".into(),
            uid: "res-uid".into(),
            ..OwnerReference::default()
        }]);
        job(
            r,
            Job {
                metadata: meta,
                ..Job::default()
            },
            &id,
        )
    }

    #[test]
    fn a_preview_config_map_reads_back_as_its_request() {
        let r = request_of(&stored(OwnerKind::PtahMigration)).expect("a request");
        assert_eq!(r.kind, OwnerKind::PtahMigration);
        assert_eq!(r.resource, "orders");
        assert_eq!(r.resource_uid, "res-uid");
        assert_eq!(r.content_digest, files().content_digest);
        assert_eq!(operation(r.kind), OperationType::History);
        let cm = stored(OwnerKind::PtahSchema);
        assert!(is_preview(&cm));
        assert_eq!(cm.immutable, Some(true));
        assert!(
            cm.data
                .as_ref()
                .is_some_and(|d| d.contains_key(supplychain::snapshot::MANIFEST_KEY)),
            "the files go with their manifest"
        );
        assert!(
            !cm.metadata
                .generate_name
                .as_deref()
                .unwrap_or_default()
                .starts_with(supplychain::snapshot::NAME_PREFIX),
            "a preview is never named as a snapshot"
        );
    }

    #[test]
    fn a_preview_without_its_annotations_is_refused_naming_them() {
        for (key, value, field) in [
            (
                ANNOTATION_PREVIEW_OF,
                "Deployment/orders",
                ANNOTATION_PREVIEW_OF,
            ),
            (ANNOTATION_PREVIEW_OF, "PtahSchema/", ANNOTATION_PREVIEW_OF),
            (ANNOTATION_PREVIEW_UID, "", ANNOTATION_PREVIEW_UID),
            (
                ANNOTATION_CONTENT_DIGEST,
                "sha256:12",
                ANNOTATION_CONTENT_DIGEST,
            ),
        ] {
            let mut cm = stored(OwnerKind::PtahSchema);
            cm.metadata
                .annotations
                .get_or_insert_default()
                .insert(key.into(), value.into());
            let e = request_of(&cm).expect_err(value);
            assert_eq!(e.field, format!("metadata.annotations[{field}]"), "{value}");
        }
    }

    #[test]
    fn one_preview_always_names_one_job_and_two_never_share_one() {
        let r = request_of(&stored(OwnerKind::PtahSchema)).expect("a request");
        let id = operation_id(&r);
        assert_eq!(id, operation_id(&r));
        assert!(crate::protocol::naming::sha256_hex(&id).is_some(), "{id}");
        assert!(job_name(&id).starts_with(NAME_PREFIX));
        assert_eq!(
            binding(&r).snapshot_name.as_deref(),
            Some("ptah-preview-abcde"),
            "its Job mounts the preview where a snapshot would be"
        );
        let mut other = r.clone();
        other.uid = "another-preview".into();
        assert_ne!(operation_id(&other), id);
    }

    #[test]
    fn the_preview_job_is_the_previews_and_not_the_resources() {
        let r = request_of(&stored(OwnerKind::PtahSchema)).expect("a request");
        let j = built_job(&r);
        let labels = j.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[LABEL_COMPONENT], COMPONENT);
        assert_eq!(labels[PREVIEW_LABEL], "ptah-preview-abcde");
        assert!(
            !labels.contains_key(SCHEMA_LABEL),
            "the resource's sweep never meets it"
        );
        let owners = j.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].kind.as_str(), owners[0].uid.as_str()),
            ("ConfigMap", "preview-uid")
        );
        assert!(
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(NAME_PREFIX))
        );
    }

    #[test]
    fn the_receiver_takes_a_result_only_from_the_previews_job_for_its_resource() {
        let cm = stored(OwnerKind::PtahSchema);
        let r = request_of(&cm).expect("a request");
        let j = built_job(&r);
        let op = op_of(&r);
        assert_eq!(check(&op, &j, &cm), Ok(()));

        let mut other_resource = op.clone();
        other_resource.resource.name = "payments".into();
        assert!(check(&other_resource, &j, &cm).is_err());
        let mut other_uid = op.clone();
        other_uid.resource_uid = "recreated".into();
        assert!(check(&other_uid, &j, &cm).is_err());
        let mut other_attempt = op.clone();
        other_attempt.attempt = 2;
        assert!(check(&other_attempt, &j, &cm).is_err());

        let mut not_preview_job = j.clone();
        not_preview_job
            .metadata
            .labels
            .get_or_insert_default()
            .insert(LABEL_COMPONENT.into(), "schema-operation".into());
        assert!(check(&op, &not_preview_job, &cm).is_err());

        let mut other_config_map = cm.clone();
        other_config_map.metadata.uid = Some("someone-elses".into());
        assert!(check(&op, &j, &other_config_map).is_err());

        let mut unlabelled = cm.clone();
        unlabelled.metadata.labels = None;
        assert!(check(&op, &j, &unlabelled).is_err());
    }
}
