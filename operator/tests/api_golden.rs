//! The API types are the single source of truth: the checked-in CRDs and
//! `docs/api.md` must be what they generate, every kind must round-trip
//! through JSON without losing a field, and every enum must be spelled as the
//! seed spells it.
use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResourceExt, Resource};
use ptah_operator::api::annotations;
use ptah_operator::api::approval::*;
use ptah_operator::api::common::*;
use ptah_operator::api::condition::*;
use ptah_operator::api::generate;
use ptah_operator::api::journal::*;
use ptah_operator::api::migration::*;
use ptah_operator::api::plan::*;
use ptah_operator::api::realm::*;
use ptah_operator::api::schema::*;
use ptah_operator::api::source::*;
use ptah_operator::api::status::*;
use ptah_operator::api::{API_VERSION, CATEGORY, GROUP, VERSION};
use ptah_operator::testing::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn checked_in_crds_and_reference_are_current() {
    let files = generate::files().expect("generate");
    let mut stale = Vec::new();
    for file in &files {
        let on_disk = std::fs::read_to_string(workspace_root().join(&file.path)).ok();
        if on_disk.as_deref() != Some(file.contents.as_str()) {
            stale.push(file.path.clone());
        }
    }
    assert!(
        stale.is_empty(),
        "stale generated files: {stale:?}\nregenerate them with `{}`",
        generate::REGENERATE
    );
    // One CRD file per kind and no leftovers from renamed kinds.
    let mut on_disk: Vec<String> = std::fs::read_dir(workspace_root().join(generate::CRD_DIR))
        .expect("read crd dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| format!("{}/{n}", generate::CRD_DIR))
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = files
        .iter()
        .map(|f| f.path.clone())
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    expected.sort();
    assert_eq!(on_disk, expected, "remove CRD files no kind generates");
}

#[test]
fn crd_yaml_reads_back_as_the_same_crd() {
    for crd in generate::crds() {
        let yaml = generate::crd_yaml(&crd).expect("yaml");
        let back: CustomResourceDefinition = serde_saphyr::from_str(&yaml).expect("parse yaml");
        assert_eq!(
            serde_json::to_value(&back).expect("json"),
            serde_json::to_value(&crd).expect("json"),
            "{} changes through YAML",
            crd.spec.names.kind
        );
    }
}

struct KindFacts {
    kind: &'static str,
    scope: &'static str,
    short: &'static str,
    status: bool,
    columns: &'static [&'static str],
}

const KINDS: &[KindFacts] = &[
    KindFacts {
        kind: "PtahSchema",
        scope: "Namespaced",
        short: "ptahs",
        status: true,
        columns: &[
            "Phase", "Revision", "Drift", "Approval", "In Sync", "Ready", "Age",
        ],
    },
    KindFacts {
        kind: "PtahSchemaPlan",
        scope: "Namespaced",
        short: "ptahplan",
        status: true,
        columns: &[
            "Schema",
            "Fingerprint",
            "Statements",
            "Destructive",
            "Privileges",
            "Ready",
            "Age",
        ],
    },
    KindFacts {
        kind: "PtahSchemaPlanChunk",
        scope: "Namespaced",
        short: "ptahchunk",
        status: false,
        columns: &["Plan", "Age"],
    },
    KindFacts {
        kind: "PtahSchemaApproval",
        scope: "Namespaced",
        short: "ptahapprove",
        status: true,
        columns: &["Schema", "Plan", "Approver", "Accepted", "Stale", "Age"],
    },
    KindFacts {
        kind: "PtahMigration",
        scope: "Namespaced",
        short: "ptahm",
        status: true,
        columns: &["Phase", "Current", "Pending", "Outcome", "Revision", "Age"],
    },
    KindFacts {
        kind: "PtahMigrationPlan",
        scope: "Namespaced",
        short: "ptahmplan",
        status: true,
        columns: &["Migration", "From", "To", "Current", "Fingerprint", "Age"],
    },
    KindFacts {
        kind: "PtahMigrationApproval",
        scope: "Namespaced",
        short: "ptahmapprove",
        status: true,
        columns: &["Migration", "Plan", "Approver", "Accepted", "Stale", "Age"],
    },
    KindFacts {
        kind: "PtahMigrationRunAcknowledgment",
        scope: "Namespaced",
        short: "ptahmack",
        status: true,
        columns: &[
            "Migration",
            "Acknowledged By",
            "Consumed",
            "Stale",
            "Operation",
            "Age",
        ],
    },
    KindFacts {
        kind: "PtahRealm",
        scope: "Cluster",
        short: "ptahr",
        status: false,
        columns: &["Engine", "Sharing", "Namespaces", "Age"],
    },
];

#[test]
fn every_kind_has_its_names_category_columns_and_status_subresource() {
    let crds = generate::crds();
    assert_eq!(crds.len(), KINDS.len());
    for (crd, facts) in crds.iter().zip(KINDS) {
        let names = &crd.spec.names;
        assert_eq!(names.kind, facts.kind);
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, facts.scope, "{}", facts.kind);
        assert_eq!(
            names.short_names.as_deref(),
            Some(&[facts.short.to_string()][..])
        );
        assert_eq!(
            names.categories.as_deref(),
            Some(&[CATEGORY.to_string()][..])
        );
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        let has_status = version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some();
        assert_eq!(
            has_status, facts.status,
            "{} status subresource",
            facts.kind
        );
        let columns: Vec<&str> = version
            .additional_printer_columns
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, facts.columns, "{} printer columns", facts.kind);
    }
    assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    assert_eq!(PtahSchema::api_version(&()), API_VERSION);
}

/// Every property of every schema carries a description: it is the
/// `kubectl explain` text.
#[test]
fn every_field_is_described() {
    fn walk(path: &str, schema: &Value, missing: &mut Vec<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                let p = format!("{path}.{name}");
                let described = prop
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    missing.push(p.clone());
                }
                walk(&p, prop, missing);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(&format!("{path}[]"), items, missing);
        }
    }
    let mut missing = Vec::new();
    for crd in generate::crds() {
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref()),
        )
        .expect("json");
        walk(&crd.spec.names.kind, &schema, &mut missing);
    }
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:#?}"
    );
}

fn rules(crd: &CustomResourceDefinition) -> Vec<(String, String)> {
    fn walk(schema: &Value, out: &mut Vec<(String, String)>) {
        if let Some(rules) = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            for r in rules {
                out.push((
                    r["rule"].as_str().unwrap_or_default().to_string(),
                    r["message"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        for key in ["properties"] {
            if let Some(props) = schema.get(key).and_then(Value::as_object) {
                for prop in props.values() {
                    walk(prop, out);
                }
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(s) = schema.get(key) {
                walk(s, out);
            }
        }
    }
    let mut out = Vec::new();
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .expect("json");
    walk(&schema, &mut out);
    out
}

#[test]
fn the_rules_the_api_promises_are_in_the_crds() {
    let schema_rules = rules(&PtahSchema::crd());
    let messages: Vec<&str> = schema_rules.iter().map(|(_, m)| m.as_str()).collect();
    for expected in [
        "spec.source must set exactly one of configMap, git, oci or flux",
        "spec.target must set exactly one of coordinationKey or realmRef",
        "spec.source.git.ref must set exactly one of branch, tag or commit",
        "spec.policy.lockTimeout must not exceed spec.execution.activeDeadlineSeconds",
        "spec.execution.connectTimeout must not exceed spec.execution.activeDeadlineSeconds",
        "metadata.name must be at most 63 characters: it is carried whole into Job labels",
    ] {
        assert!(
            messages.contains(&expected),
            "missing rule {expected:?} in {messages:#?}"
        );
    }
    for field in [
        "spec.interval",
        "spec.execution.failureRetryInterval",
        "spec.execution.connectTimeout",
        "spec.policy.lockTimeout",
    ] {
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with(&format!("{field} must be a duration"))),
            "no duration rule for {field}"
        );
    }
    for crd in [
        PtahSchemaPlan::crd(),
        PtahSchemaPlanChunk::crd(),
        PtahMigrationPlan::crd(),
        PtahSchemaApproval::crd(),
        PtahMigrationApproval::crd(),
        PtahMigrationRunAcknowledgment::crd(),
    ] {
        assert!(
            rules(&crd)
                .iter()
                .any(|(r, m)| r == "self == oldSelf" && m.starts_with("spec of a")),
            "{} spec is not immutable",
            crd.spec.names.kind
        );
    }
    assert!(
        rules(&PtahRealm::crd())
            .iter()
            .any(|(r, m)| r == "self == oldSelf" && m.starts_with("spec.engine")),
        "PtahRealm engine is not immutable"
    );
    // Every message names a field or the object; none is empty.
    for crd in generate::crds() {
        for (rule, message) in rules(&crd) {
            assert!(
                !message.is_empty(),
                "{}: rule {rule:?} has no message",
                crd.spec.names.kind
            );
        }
    }
}

fn spelled<T: Serialize>(value: T) -> String {
    match serde_json::to_value(value).expect("json") {
        Value::String(s) => s,
        other => panic!("not a string: {other}"),
    }
}

fn enum_values(crd: &CustomResourceDefinition, pointer: &str) -> Vec<String> {
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .expect("json");
    schema
        .pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no enum at {pointer}"))
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

#[test]
fn phases_are_spelled_as_the_seed_spells_them() {
    use SchemaPhase as S;
    let schema = [
        (S::Pending, "Pending"),
        (S::Resolving, "Resolving"),
        (S::Verifying, "Verifying"),
        (S::Observing, "Observing"),
        (S::Planning, "Planning"),
        (S::ReadyToApply, "ReadyToApply"),
        (S::AwaitingApproval, "AwaitingApproval"),
        (S::Applying, "Applying"),
        (S::VerifyingConvergence, "VerifyingConvergence"),
        (S::InSync, "InSync"),
        (S::Blocked, "Blocked"),
        (S::Failed, "Failed"),
        (S::Suspended, "Suspended"),
    ];
    for (phase, text) in schema {
        assert_eq!(spelled(phase), text);
    }
    assert_eq!(
        enum_values(
            &PtahSchema::crd(),
            "/properties/status/properties/phase/enum"
        ),
        schema
            .iter()
            .map(|(_, t)| t.to_string())
            .collect::<Vec<_>>()
    );
    use MigrationPhase as M;
    let migration = [
        (M::Pending, "Pending"),
        (M::Resolving, "Resolving"),
        (M::Verifying, "Verifying"),
        (M::Reading, "Reading"),
        (M::Planning, "Planning"),
        (M::AwaitingApproval, "AwaitingApproval"),
        (M::Applying, "Applying"),
        (M::VerifyingHistory, "VerifyingHistory"),
        (M::InSync, "InSync"),
        (M::Blocked, "Blocked"),
        (M::Failed, "Failed"),
        (M::Suspended, "Suspended"),
    ];
    for (phase, text) in migration {
        assert_eq!(spelled(phase), text);
    }
    assert_eq!(
        enum_values(
            &PtahMigration::crd(),
            "/properties/status/properties/phase/enum"
        ),
        migration
            .iter()
            .map(|(_, t)| t.to_string())
            .collect::<Vec<_>>()
    );
}

#[test]
fn condition_types_include_the_kstatus_trio() {
    let schema = enum_values(
        &PtahSchema::crd(),
        "/properties/status/properties/conditions/items/properties/type/enum",
    );
    for t in [
        "ArtifactResolved",
        "ArtifactVerified",
        "EngineSupported",
        "DriftDetected",
        "PlanReady",
        "ApprovalRequired",
        "Applying",
        "InSync",
        "Ready",
        "Suspended",
        "ReconciliationFailed",
        "Reconciling",
        "Stalled",
    ] {
        assert!(schema.contains(&t.to_string()), "schema condition {t}");
    }
    let migration = enum_values(
        &PtahMigration::crd(),
        "/properties/status/properties/conditions/items/properties/type/enum",
    );
    for t in [
        "Ready",
        "Progressing",
        "Blocked",
        "ApprovalRequired",
        "ArtifactVerified",
        "Reconciling",
        "Stalled",
    ] {
        assert!(
            migration.contains(&t.to_string()),
            "migration condition {t}"
        );
    }
    assert_eq!(spelled(SchemaConditionType::Reconciling), "Reconciling");
    assert_eq!(spelled(MigrationConditionType::Stalled), "Stalled");
    assert_eq!(spelled(ConditionStatus::Unknown), "Unknown");
    assert_eq!(spelled(ApprovalConditionType::Consumed), "Consumed");
    assert_eq!(spelled(AcknowledgmentConditionType::Stale), "Stale");
    assert_eq!(spelled(MigrationPlanConditionType::Current), "Current");
    assert_eq!(spelled(SchemaPlanConditionType::Ready), "Ready");
}

#[test]
fn reasons_the_seed_names_are_spelled_exactly() {
    use Reason as R;
    for (reason, text) in [
        (R::InSync, "InSync"),
        (R::ScopedConverged, "ScopedConverged"),
        (
            R::ConvergedAfterUnknownOutcome,
            "ConvergedAfterUnknownOutcome",
        ),
        (R::ApplyOutcomeUnknown, "ApplyOutcomeUnknown"),
        (R::HistoryMatched, "HistoryMatched"),
        (R::HistoryDirty, "HistoryDirty"),
        (R::HistoryModified, "HistoryModified"),
        (R::HistoryOutOfOrder, "HistoryOutOfOrder"),
        (R::HistoryAhead, "HistoryAhead"),
        (R::ApplyDisabled, "ApplyDisabled"),
        (R::RealmConflict, "RealmConflict"),
        (R::RealmNotAuthorized, "RealmNotAuthorized"),
        (R::UnsupportedEngine, "UnsupportedEngine"),
        (R::TargetIdentityChanged, "TargetIdentityChanged"),
        (R::SnapshotTaken, "SnapshotTaken"),
        (R::CommitResolved, "CommitResolved"),
        (R::ReadRequested, "ReadRequested"),
        (R::ReadRequestInvalid, "ReadRequestInvalid"),
        (R::ReadRestarted, "ReadRestarted"),
        (R::PlanStale, "PlanStale"),
        (R::RunAcknowledged, "RunAcknowledged"),
        (R::PodAdmissionRefused, "PodAdmissionRefused"),
    ] {
        assert_eq!(spelled(reason), text);
        let back: Reason = serde_json::from_value(Value::String(text.into())).expect("parse");
        assert_eq!(back, reason);
    }
    assert!(serde_json::from_value::<Reason>(Value::String("NoSuchReason".into())).is_err());
}

#[test]
fn journal_and_run_vocabulary_is_spelled_exactly() {
    use JournalEntryType as J;
    for (t, text) in [
        (J::PlanPublished, "PlanPublished"),
        (J::ApprovalAccepted, "ApprovalAccepted"),
        (J::ApplyFinished, "ApplyFinished"),
        (J::Verified, "Verified"),
        (J::RunFinished, "RunFinished"),
        (J::RunAcknowledged, "RunAcknowledged"),
        (J::OperationFailed, "OperationFailed"),
    ] {
        assert_eq!(spelled(t), text);
    }
    use RunOutcome as O;
    for (o, text) in [
        (O::UpToDate, "UpToDate"),
        (O::Applied, "Applied"),
        (O::Failed, "Failed"),
        (O::Partial, "Partial"),
        (O::Unknown, "Unknown"),
    ] {
        assert_eq!(spelled(o), text);
    }
    assert_eq!(spelled(Authorization::Approval), "Approval");
    assert_eq!(spelled(Authorization::Policy), "Policy");
    assert_eq!(spelled(Resolution::HistoryRead), "HistoryRead");
    assert_eq!(spelled(Resolution::Acknowledged), "Acknowledged");
    assert_eq!(spelled(JournalOutcome::DriftRemains), "DriftRemains");
    assert_eq!(spelled(ApplyPolicy::OnApproval), "OnApproval");
    assert_eq!(spelled(SchemaTransactionMode::File), "file");
    assert_eq!(spelled(MigrationTransactionMode::None), "none");
    assert_eq!(spelled(DriftSeverityPolicy::Destructive), "destructive");
    assert_eq!(
        spelled(DriftCategory::RlsPoliciesModified),
        "rls_policies_modified"
    );
    assert_eq!(spelled(DriftSeverity::Destructive), "destructive");
    assert_eq!(spelled(SourceKind::OCI), "OCI");
    assert_eq!(spelled(SourceKind::ConfigMap), "ConfigMap");
    assert_eq!(
        spelled(RegistryAuthMode::DockerConfigJSON),
        "DockerConfigJSON"
    );
    assert_eq!(spelled(RealmSharing::Exclusive), "Exclusive");
    assert_eq!(
        spelled(PrivilegeChange::RowSecurityPolicy),
        "RowSecurityPolicy"
    );
    assert_eq!(spelled(OperationType::History), "History");
}

#[test]
fn annotation_names_are_the_seeds() {
    assert_eq!(
        annotations::READ_REQUESTED_AT,
        "operator.ptah.run/read-requested-at"
    );
    assert_eq!(
        annotations::SETTLED_APPLY,
        "operator.ptah.run/settled-apply"
    );
    assert_eq!(
        annotations::UNRESOLVED_RUN,
        "operator.ptah.run/unresolved-run"
    );
    assert_eq!(annotations::READ_REQUEST_MAX_BYTES, 64);
}

#[test]
fn a_manifest_with_only_required_fields_gets_the_documented_defaults() {
    let spec: PtahSchemaSpec = serde_json::from_value(serde_json::json!({
        "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "orders"},
        "source": {"configMap": {"name": "schema"}}
    }))
    .expect("minimal spec");
    assert_eq!(spec.interval.as_str(), "10m");
    assert_eq!(spec.policy.apply, ApplyPolicy::OnApproval);
    assert_eq!(spec.policy.lock_timeout.as_str(), "30s");
    assert_eq!(spec.policy.transaction_mode, SchemaTransactionMode::File);
    assert_eq!(spec.execution.failure_retry_interval.as_str(), "30s");
    assert_eq!(spec.execution.active_deadline_seconds, 900);
    assert_eq!(spec.execution.connect_timeout.as_str(), "10s");
    assert!(!spec.suspend);
    assert_eq!(spec.source.kind(), Some(SourceKind::ConfigMap));
    let migration: PtahMigrationSpec = serde_json::from_value(serde_json::json!({
        "target": {"engine": "MySQL", "urlFrom": {"name": "db", "key": "url"}, "realmRef": {"name": "shared"}},
        "source": {"git": {"url": "https://git.example/acme/db.git", "ref": {"tag": "v1"}}}
    }))
    .expect("minimal migration spec");
    assert_eq!(migration.policy.lock_timeout.as_str(), "5m");
    assert_eq!(migration.policy.transaction_mode, None);
    assert_eq!(migration.source.kind(), Some(SourceKind::Git));
    // The CRD carries the same defaults the API server applies.
    let crd = serde_json::to_value(PtahSchema::crd()).expect("json");
    let spec_schema = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .expect("spec schema");
    assert_eq!(spec_schema["interval"]["default"], "10m");
    assert_eq!(
        spec_schema["execution"]["properties"]["failureRetryInterval"]["default"],
        "30s"
    );
}

// ---- JSON round trips, one fully populated object per kind (ptah_operator::testing) ----

/// Serialize, deserialize, compare; and the JSON of the copy equals the JSON
/// of the original, so no field is dropped or renamed on the way.
fn round_trip<K>(original: &K)
where
    K: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug + Resource<DynamicType = ()>,
{
    let json = serde_json::to_value(original).expect("serialize");
    assert_eq!(json["apiVersion"], API_VERSION);
    assert_eq!(json["kind"], K::kind(&()).as_ref());
    let text = serde_json::to_string(&json).expect("text");
    let back: K = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(&back, original, "{} changes through JSON", K::kind(&()));
    assert_eq!(serde_json::to_value(&back).expect("serialize again"), json);
}

/// A fully populated example has no empty object or list anywhere (so every
/// optional field is set), which makes the round trip cover every field.
fn assert_fully_populated<K: Serialize>(value: &K, kind: &str) {
    fn walk(path: &str, v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Null => out.push(path.to_string()),
            Value::Object(map) => {
                if map.is_empty() {
                    out.push(path.to_string());
                }
                for (k, v) in map {
                    walk(&format!("{path}.{k}"), v, out);
                }
            }
            Value::Array(items) => {
                if items.is_empty() {
                    out.push(path.to_string());
                }
                for v in items {
                    walk(&format!("{path}[]"), v, out);
                }
            }
            _ => {}
        }
    }
    let mut empty = Vec::new();
    walk(
        kind,
        &serde_json::to_value(value).expect("json"),
        &mut empty,
    );
    assert!(empty.is_empty(), "empty in the example: {empty:?}");
}

/// Every property the CRD declares for spec and status (outside Kubernetes'
/// own types) appears in the fully populated example.
fn assert_schema_covered<K: Serialize>(crd: &CustomResourceDefinition, value: &K) {
    fn walk(path: &str, schema: &Value, value: Option<&Value>, missing: &mut Vec<String>) {
        if path.ends_with(".affinity")
            || path.ends_with(".resources")
            || path.ends_with(".tolerations")
            || path.ends_with(".imagePullSecrets")
        {
            return;
        }
        let Some(value) = value else {
            missing.push(path.to_string());
            return;
        };
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                walk(&format!("{path}.{name}"), prop, value.get(name), missing);
            }
        }
        if let (Some(items), Some(first)) = (schema.get("items"), value.get(0)) {
            walk(&format!("{path}[]"), items, Some(first), missing);
        }
    }
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .expect("json");
    let value = serde_json::to_value(value).expect("json");
    let mut missing = Vec::new();
    for top in ["spec", "status"] {
        if let Some(s) = schema.pointer(&format!("/properties/{top}")) {
            walk(top, s, value.get(top), &mut missing);
        }
    }
    // Unions: a source holds one kind, a ref one name, a target one coordination.
    missing.retain(|p| {
        !matches!(
            p.as_str(),
            "spec.source.configMap"
                | "spec.source.git"
                | "spec.source.oci"
                | "spec.source.flux"
                | "spec.source.sourcePolicyFrom"
                | "spec.source.verificationPolicyFrom"
                | "spec.source.git.ref.tag"
                | "spec.source.git.ref.commit"
                | "spec.target.coordinationKey"
                | "spec.target.realmRef"
                | "spec.dev"
        )
    });
    assert!(
        missing.is_empty(),
        "{}: the example leaves out {missing:#?}",
        crd.spec.names.kind
    );
}

#[test]
fn every_kind_round_trips_through_json() {
    let schema = schema_example();
    assert_fully_populated(&schema, "PtahSchema");
    assert_schema_covered(&PtahSchema::crd(), &schema);
    round_trip(&schema);

    let migration = migration_example();
    assert_fully_populated(&migration, "PtahMigration");
    assert_schema_covered(&PtahMigration::crd(), &migration);
    round_trip(&migration);

    let plan = schema_plan_example();
    assert_fully_populated(&plan, "PtahSchemaPlan");
    assert_schema_covered(&PtahSchemaPlan::crd(), &plan);
    round_trip(&plan);

    let chunk = chunk_example();
    assert_schema_covered(&PtahSchemaPlanChunk::crd(), &chunk);
    round_trip(&chunk);

    let mplan = migration_plan_example();
    assert_fully_populated(&mplan, "PtahMigrationPlan");
    assert_schema_covered(&PtahMigrationPlan::crd(), &mplan);
    round_trip(&mplan);

    let approval = schema_approval_example();
    assert_fully_populated(&approval, "PtahSchemaApproval");
    assert_schema_covered(&PtahSchemaApproval::crd(), &approval);
    round_trip(&approval);

    let mapproval = migration_approval_example();
    assert_fully_populated(&mapproval, "PtahMigrationApproval");
    assert_schema_covered(&PtahMigrationApproval::crd(), &mapproval);
    round_trip(&mapproval);

    let ack = acknowledgment_example();
    assert_fully_populated(&ack, "PtahMigrationRunAcknowledgment");
    assert_schema_covered(&PtahMigrationRunAcknowledgment::crd(), &ack);
    round_trip(&ack);

    let realm = realm_example();
    assert_schema_covered(&PtahRealm::crd(), &realm);
    round_trip(&realm);
}

#[test]
fn the_other_source_kinds_round_trip_too() {
    for source in [
        Source {
            config_map: Some(ConfigMapSource {
                name: "schema".into(),
                keys: vec!["schema.hcl".into(), "rows.hcl".into()],
            }),
            git: None,
            oci: None,
            flux: None,
            source_policy_from: Some(policy_ref("source-policy")),
            verification_policy_from: None,
        },
        Source {
            config_map: None,
            git: Some(GitSource {
                url: "ssh://git@git.example/acme/db.git".into(),
                git_ref: GitRef {
                    branch: None,
                    tag: None,
                    commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                },
                path: None,
                secret_ref: None,
            }),
            oci: None,
            flux: None,
            source_policy_from: None,
            verification_policy_from: None,
        },
        Source {
            config_map: None,
            git: None,
            oci: None,
            flux: Some(FluxSource {
                kind: FluxSourceKind::OCIRepository,
                name: "shop-schema".into(),
                path: Some("db".into()),
            }),
            source_policy_from: None,
            verification_policy_from: Some(policy_ref("verification")),
        },
    ] {
        let mut schema = schema_example();
        schema.spec.source = source;
        round_trip(&schema);
    }
}

#[test]
fn wire_names_of_identifiers_follow_kubernetes_casing() {
    let json = serde_json::to_value(migration_example()).expect("json");
    let run = &json["status"]["lastRun"];
    for key in ["operationID", "planUID", "approvalUID", "jobUID"] {
        assert!(run.get(key).is_some(), "lastRun.{key}");
    }
    let entry = &json["status"]["journal"][0];
    for key in [
        "operationID",
        "approvalUID",
        "planUID",
        "jobUID",
        "acknowledgmentUID",
    ] {
        assert!(entry.get(key).is_some(), "journal[].{key}");
    }
    let oci = &json["spec"]["source"]["oci"];
    assert!(oci.get("ociRef").is_some());
    assert!(oci["transport"].get("plainHTTP").is_some());
    assert!(oci["registryAuthFrom"].get("dockerConfigJSONKey").is_some());
    let ack = serde_json::to_value(acknowledgment_example()).expect("json");
    assert!(ack["spec"].get("operationID").is_some());
    assert!(ack["spec"].get("mutationRequestUID").is_some());
    let schema = serde_json::to_value(schema_example()).expect("json");
    assert!(schema["spec"]["source"]["git"].get("ref").is_some());
    assert!(
        schema["status"]["pendingObservation"]
            .get("applyOperationID")
            .is_some()
    );
}
