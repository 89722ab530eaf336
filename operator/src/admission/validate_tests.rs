//! One test per admission rule of approvals and acknowledgments.

use serde_json::{Value, json};

use super::*;

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

fn r(name: &str, uid: &str) -> ObjectRef {
    ObjectRef {
        name: name.into(),
        uid: uid.into(),
    }
}

fn target() -> Value {
    json!({"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "orders"})
}

fn source() -> Value {
    json!({"configMap": {"name": "orders-schema"}})
}

fn meta(name: &str, uid: &str) -> Value {
    json!({"name": name, "namespace": "orders", "uid": uid})
}

fn plan_bindings() -> Value {
    json!({
        "contractVersion": 2,
        "source": {"kind": "ConfigMap", "contentDigest": digest(1)},
        "coordinationDigest": digest(2),
        "targetIdentityDigest": digest(3),
        "policyFingerprint": digest(4),
        "executionBinding": {
            "epoch": format!("v1-{}", "ab".repeat(16)),
            "controllerStateVersion": 1,
            "ptahVersion": "0.23.0",
            "executorImage": format!("ghcr.io/stokaro/ptah@{}", digest(5)),
            "runnerProtocolVersion": 1
        }
    })
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// A PtahSchema `orders` (UID `schema-1`) whose `status.plan` is `plan`
/// (name, UID, fingerprint).
fn schema(plan: Option<(&str, &str, &str)>) -> PtahSchema {
    let mut value = json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchema",
        "metadata": meta("orders", "schema-1"),
        "spec": {"target": target(), "source": source()},
    });
    if let Some((name, uid, fingerprint)) = plan {
        value["status"] = json!({"plan": {"name": name, "uid": uid, "fingerprint": fingerprint}});
    }
    serde_json::from_value(value).expect("schema fixture")
}

fn schema_plan(name: &str, uid: &str, fingerprint: &str, schema: ObjectRef) -> PtahSchemaPlan {
    let spec = merge(
        plan_bindings(),
        json!({
            "schemaRef": schema,
            "fingerprint": fingerprint,
            "contentDigest": digest(6),
            "size": 100,
            "actualStateFingerprint": "a",
            "desiredStateFingerprint": "d",
            "dialect": "postgres",
            "statementCount": 1,
            "chunks": [{"name": format!("{name}-000"), "index": 0, "digest": digest(7), "size": 100}]
        }),
    );
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchemaPlan",
        "metadata": meta(name, uid),
        "spec": spec,
    }))
    .expect("schema plan fixture")
}

fn schema_approval(schema: ObjectRef, plan: ObjectRef, fingerprint: &str) -> PtahSchemaApproval {
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchemaApproval",
        "metadata": meta("approve", "approval-1"),
        "spec": {"schemaRef": schema, "planRef": plan, "planFingerprint": fingerprint},
    }))
    .expect("approval fixture")
}

/// A PtahMigration `orders` (UID `migration-1`) with `status` as given.
fn migration(status: Value) -> PtahMigration {
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigration",
        "metadata": meta("orders", "migration-1"),
        "spec": {"target": target(), "source": source()},
        "status": status,
    }))
    .expect("migration fixture")
}

fn migration_plan(
    name: &str,
    uid: &str,
    fingerprint: &str,
    migration: ObjectRef,
) -> PtahMigrationPlan {
    let spec = merge(
        plan_bindings(),
        json!({
            "migrationRef": migration,
            "fingerprint": fingerprint,
            "migrations": [{"version": 7, "checksum": "h1:abc"}],
            "historyFingerprint": digest(8),
            "currentVersion": 6
        }),
    );
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigrationPlan",
        "metadata": meta(name, uid),
        "spec": spec,
    }))
    .expect("migration plan fixture")
}

fn migration_approval(
    migration: ObjectRef,
    plan: ObjectRef,
    fingerprint: &str,
) -> PtahMigrationApproval {
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigrationApproval",
        "metadata": meta("approve", "approval-1"),
        "spec": {"migrationRef": migration, "planRef": plan, "planFingerprint": fingerprint},
    }))
    .expect("migration approval fixture")
}

fn acknowledgment(migration: ObjectRef, operation_id: &str) -> PtahMigrationRunAcknowledgment {
    serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigrationRunAcknowledgment",
        "metadata": meta("ack", "ack-1"),
        "spec": {"migrationRef": migration, "operationID": operation_id},
    }))
    .expect("acknowledgment fixture")
}

fn unresolved(operation: &str) -> Value {
    json!({"unresolvedRun": {
        "operationID": operation,
        "outcome": "Partial",
        "planName": "mplan-1",
        "planUID": "mplan-uid-1",
        "jobName": "orders-apply-1",
        "jobUID": "job-uid-1",
        "recordedAt": "2026-01-01T00:00:00Z"
    }})
}

fn message(r: Result<(), Refusal>) -> String {
    match r {
        Ok(()) => panic!("admitted, expected a refusal"),
        Err(e) => e.to_string(),
    }
}

// --- PtahSchemaApproval ---

fn current_schema() -> (PtahSchema, PtahSchemaPlan) {
    let fp = digest(15);
    (
        schema(Some(("plan-1", "plan-uid-1", &fp))),
        schema_plan("plan-1", "plan-uid-1", &fp, r("orders", "schema-1")),
    )
}

#[test]
fn an_approval_of_the_current_plan_is_admitted() {
    let (schema, plan) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    assert_eq!(
        validate_schema_approval(&approval, Some(&schema), Some(&plan)),
        Ok(())
    );
}

#[test]
fn an_approval_of_a_schema_that_does_not_exist_is_refused_naming_spec_schema_ref() {
    let (_, plan) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    let m = message(validate_schema_approval(&approval, None, Some(&plan)));
    assert_eq!(
        m,
        "spec.schemaRef: PtahSchema orders does not exist in this namespace"
    );
}

#[test]
fn an_approval_of_a_deleted_and_recreated_schema_is_refused_naming_spec_schema_ref_uid() {
    let (schema, plan) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-0"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&plan),
    ));
    assert!(m.starts_with("spec.schemaRef.uid: PtahSchema orders has UID schema-1, not schema-0"));
}

#[test]
fn an_approval_while_no_plan_is_published_is_refused_naming_spec_plan_ref() {
    let (_, plan) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema(None)),
        Some(&plan),
    ));
    assert!(
        m.starts_with("spec.planRef: PtahSchema orders has no current plan"),
        "{m}"
    );
}

#[test]
fn an_approval_of_a_replaced_plan_approves_nothing_and_names_the_current_one() {
    // status.plan moved from plan-1 to plan-2: the approval of plan-1 does
    // not carry over.
    let fp2 = digest(16);
    let schema = schema(Some(("plan-2", "plan-uid-2", &fp2)));
    let old = schema_plan("plan-1", "plan-uid-1", &digest(15), r("orders", "schema-1"));
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&old),
    ));
    assert_eq!(
        m,
        "spec.planRef: plan plan-1 (UID plan-uid-1) is not the current plan of PtahSchema orders \
         (current: plan-2 (UID plan-uid-2)); read the current plan and approve that"
    );
}

#[test]
fn an_approval_of_another_plan_under_the_current_name_is_refused_naming_spec_plan_ref() {
    // Same name, another UID: the plan was deleted and published again.
    let (schema, plan) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-0"),
        &digest(15),
    );
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&plan),
    ));
    assert!(
        m.starts_with("spec.planRef: plan plan-1 (UID plan-uid-0) is not the current plan"),
        "{m}"
    );
    assert!(m.contains("current: plan-1 (UID plan-uid-1)"), "{m}");
}

#[test]
fn an_approval_with_another_fingerprint_is_refused_naming_spec_plan_fingerprint() {
    let (schema, plan) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(99),
    );
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&plan),
    ));
    assert_eq!(
        m,
        format!(
            "spec.planFingerprint: {} is not the fingerprint of plan plan-1 (current: {}); \
             read the current plan and approve that",
            digest(99),
            digest(15)
        )
    );
}

#[test]
fn an_approval_of_a_current_plan_whose_object_is_gone_is_refused() {
    let (schema, _) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    let m = message(validate_schema_approval(&approval, Some(&schema), None));
    assert!(
        m.starts_with("spec.planRef: PtahSchemaPlan plan-1 does not exist"),
        "{m}"
    );
}

#[test]
fn an_approval_is_refused_when_the_plan_object_disagrees_with_status_plan() {
    let (schema, _) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    // Another object under the plan's name.
    let other = schema_plan("plan-1", "plan-uid-9", &digest(15), r("orders", "schema-1"));
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&other),
    ));
    assert!(
        m.starts_with("spec.planRef.uid: PtahSchemaPlan plan-1 has UID plan-uid-9"),
        "{m}"
    );
    // The object's fingerprint is not the one status.plan reports.
    let other = schema_plan("plan-1", "plan-uid-1", &digest(16), r("orders", "schema-1"));
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&other),
    ));
    assert!(m.starts_with("spec.planFingerprint:"), "{m}");
}

#[test]
fn an_approval_of_a_plan_made_for_another_schema_is_refused() {
    let (schema, _) = current_schema();
    let approval = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    let foreign = schema_plan(
        "plan-1",
        "plan-uid-1",
        &digest(15),
        r("billing", "schema-7"),
    );
    let m = message(validate_schema_approval(
        &approval,
        Some(&schema),
        Some(&foreign),
    ));
    assert_eq!(
        m,
        "spec.planRef: plan plan-1 belongs to PtahSchema billing (UID schema-7), \
         not to PtahSchema orders (UID schema-1)"
    );
}

// --- PtahMigrationApproval ---

fn current_migration() -> (PtahMigration, PtahMigrationPlan) {
    let fp = digest(20);
    (
        migration(json!({"plan": {"name": "mplan-1", "uid": "mplan-uid-1", "fingerprint": fp}})),
        migration_plan("mplan-1", "mplan-uid-1", &fp, r("orders", "migration-1")),
    )
}

#[test]
fn a_migration_approval_of_the_current_plan_is_admitted() {
    let (migration, plan) = current_migration();
    let approval = migration_approval(
        r("orders", "migration-1"),
        r("mplan-1", "mplan-uid-1"),
        &digest(20),
    );
    assert_eq!(
        validate_migration_approval(&approval, Some(&migration), Some(&plan)),
        Ok(())
    );
}

#[test]
fn a_migration_approval_of_a_replaced_plan_is_refused_naming_the_current_one() {
    let fp = digest(21);
    let moved =
        migration(json!({"plan": {"name": "mplan-2", "uid": "mplan-uid-2", "fingerprint": fp}}));
    let (_, old) = current_migration();
    let approval = migration_approval(
        r("orders", "migration-1"),
        r("mplan-1", "mplan-uid-1"),
        &digest(20),
    );
    let m = message(validate_migration_approval(
        &approval,
        Some(&moved),
        Some(&old),
    ));
    assert_eq!(
        m,
        "spec.planRef: plan mplan-1 (UID mplan-uid-1) is not the current plan of PtahMigration \
         orders (current: mplan-2 (UID mplan-uid-2)); read the current plan and approve that"
    );
}

#[test]
fn a_migration_approval_with_another_fingerprint_is_refused_naming_spec_plan_fingerprint() {
    // The fingerprint binds the history the sequence continues: a plan for
    // another reading of the history has another fingerprint.
    let (migration, plan) = current_migration();
    let approval = migration_approval(
        r("orders", "migration-1"),
        r("mplan-1", "mplan-uid-1"),
        &digest(22),
    );
    let m = message(validate_migration_approval(
        &approval,
        Some(&migration),
        Some(&plan),
    ));
    assert!(m.starts_with("spec.planFingerprint:"), "{m}");
}

#[test]
fn a_migration_approval_of_a_missing_or_recreated_migration_is_refused_naming_spec_migration_ref() {
    let (migration, plan) = current_migration();
    let approval = migration_approval(
        r("orders", "migration-0"),
        r("mplan-1", "mplan-uid-1"),
        &digest(20),
    );
    let m = message(validate_migration_approval(&approval, None, Some(&plan)));
    assert_eq!(
        m,
        "spec.migrationRef: PtahMigration orders does not exist in this namespace"
    );
    let m = message(validate_migration_approval(
        &approval,
        Some(&migration),
        Some(&plan),
    ));
    assert!(m.starts_with("spec.migrationRef.uid:"), "{m}");
}

#[test]
fn a_migration_approval_while_nothing_is_pending_or_a_run_is_unresolved_is_refused() {
    let (_, plan) = current_migration();
    let approval = migration_approval(
        r("orders", "migration-1"),
        r("mplan-1", "mplan-uid-1"),
        &digest(20),
    );
    for status in [json!({}), unresolved(&digest(30))] {
        let m = message(validate_migration_approval(
            &approval,
            Some(&migration(status)),
            Some(&plan),
        ));
        assert!(
            m.starts_with("spec.planRef: PtahMigration orders has no current plan"),
            "{m}"
        );
    }
}

#[test]
fn a_migration_approval_of_a_plan_for_another_migration_or_gone_is_refused() {
    let (migration, _) = current_migration();
    let approval = migration_approval(
        r("orders", "migration-1"),
        r("mplan-1", "mplan-uid-1"),
        &digest(20),
    );
    let foreign = migration_plan(
        "mplan-1",
        "mplan-uid-1",
        &digest(20),
        r("orders", "migration-0"),
    );
    let m = message(validate_migration_approval(
        &approval,
        Some(&migration),
        Some(&foreign),
    ));
    assert!(
        m.starts_with(
            "spec.planRef: plan mplan-1 belongs to PtahMigration orders (UID migration-0)"
        ),
        "{m}"
    );
    let m = message(validate_migration_approval(
        &approval,
        Some(&migration),
        None,
    ));
    assert!(
        m.starts_with("spec.planRef: PtahMigrationPlan mplan-1 does not exist"),
        "{m}"
    );
}

// --- PtahMigrationRunAcknowledgment ---

#[test]
fn an_acknowledgment_of_the_unresolved_run_is_admitted() {
    let op = digest(30);
    let ack = acknowledgment(r("orders", "migration-1"), &op);
    assert_eq!(
        validate_acknowledgment(&ack, Some(&migration(unresolved(&op)))),
        Ok(())
    );
}

#[test]
fn an_acknowledgment_of_another_run_is_refused_naming_the_unresolved_one() {
    let ack = acknowledgment(r("orders", "migration-1"), &digest(31));
    let m = message(validate_acknowledgment(
        &ack,
        Some(&migration(unresolved(&digest(30)))),
    ));
    assert_eq!(
        m,
        format!(
            "spec.operationID: run {} is not the unresolved run of PtahMigration orders \
             (unresolved: operation {}, plan mplan-1, Job orders-apply-1); establish what that \
             run did, then acknowledge it",
            digest(31),
            digest(30)
        )
    );
}

#[test]
fn an_acknowledgment_when_no_run_is_unresolved_is_refused_naming_spec_operation_id() {
    let op = digest(30);
    let ack = acknowledgment(r("orders", "migration-1"), &op);
    let m = message(validate_acknowledgment(&ack, Some(&migration(json!({})))));
    assert_eq!(
        m,
        format!(
            "spec.operationID: PtahMigration orders has no unresolved run (status.unresolvedRun \
             is unset), so run {op} cannot be acknowledged"
        )
    );
    // A run already settled says how.
    let settled = migration(json!({"resolvedRun": {
        "operationID": op,
        "outcome": "Unknown",
        "resolution": "HistoryRead",
        "resolvedAt": "2026-01-01T00:00:00Z"
    }}));
    let m = message(validate_acknowledgment(&ack, Some(&settled)));
    assert!(m.ends_with("; it was already settled (HistoryRead)"), "{m}");
}

#[test]
fn an_acknowledgment_of_a_missing_or_recreated_migration_is_refused_naming_spec_migration_ref() {
    let op = digest(30);
    let ack = acknowledgment(r("orders", "migration-0"), &op);
    let m = message(validate_acknowledgment(&ack, None));
    assert!(m.starts_with("spec.migrationRef: PtahMigration orders does not exist"));
    let m = message(validate_acknowledgment(
        &ack,
        Some(&migration(unresolved(&op))),
    ));
    assert!(
        m.starts_with(
            "spec.migrationRef.uid: PtahMigration orders has UID migration-1, not migration-0"
        ),
        "{m}"
    );
}

// --- Stamps and updates ---

fn alice() -> Identity {
    Identity {
        username: "alice".into(),
        uid: Some("alice-uid".into()),
        groups: vec!["dba".into()],
    }
}

#[test]
fn stamps_of_the_requester_are_admitted() {
    let spec = json!({"approver": alice(), "approvedAt": "2026-01-01T00:00:00Z", "mutationRequestUID": "req"});
    assert_eq!(
        validate_stamp(Reviewed::SchemaApproval, &spec, &alice()),
        Ok(())
    );
    let spec = json!({"acknowledgedBy": alice(), "acknowledgedAt": "2026-01-01T00:00:00Z", "mutationRequestUID": "req"});
    assert_eq!(
        validate_stamp(Reviewed::RunAcknowledgment, &spec, &alice()),
        Ok(())
    );
}

#[test]
fn an_unstamped_object_is_refused_naming_the_missing_stamp() {
    let m = message(validate_stamp(
        Reviewed::MigrationApproval,
        &json!({}),
        &alice(),
    ));
    assert!(m.starts_with("spec.approver: not stamped"), "{m}");
    let m = message(validate_stamp(
        Reviewed::MigrationApproval,
        &json!({"approver": alice(), "mutationRequestUID": "req"}),
        &alice(),
    ));
    assert!(m.starts_with("spec.approvedAt: not stamped"), "{m}");
    let m = message(validate_stamp(
        Reviewed::RunAcknowledgment,
        &json!({"acknowledgedBy": alice(), "acknowledgedAt": "2026-01-01T00:00:00Z"}),
        &alice(),
    ));
    assert!(m.starts_with("spec.mutationRequestUID: not stamped"), "{m}");
}

#[test]
fn a_stamp_naming_someone_else_is_refused() {
    let mut mallory = alice();
    mallory.username = "mallory".into();
    let spec = json!({"approver": mallory, "approvedAt": "2026-01-01T00:00:00Z", "mutationRequestUID": "req"});
    let m = message(validate_stamp(Reviewed::SchemaApproval, &spec, &alice()));
    assert_eq!(
        m,
        "spec.approver: names mallory, but the request was made by alice; admission stamps who \
         decided, a client cannot"
    );
    // The same name with other groups is not the requester either.
    let mut escalated = alice();
    escalated.groups.push("system:masters".into());
    let spec = json!({"approver": escalated, "approvedAt": "2026-01-01T00:00:00Z", "mutationRequestUID": "req"});
    assert!(validate_stamp(Reviewed::SchemaApproval, &spec, &alice()).is_err());
}

#[test]
fn an_update_that_keeps_the_spec_is_admitted_and_one_that_changes_it_is_refused() {
    let spec = json!({"approver": alice(), "approvedAt": "2026-01-01T00:00:00Z"});
    assert_eq!(
        validate_update(Reviewed::SchemaApproval, &spec, &spec.clone()),
        Ok(())
    );
    let changed =
        json!({"approver": {"username": "mallory"}, "approvedAt": "2026-01-01T00:00:00Z"});
    assert_eq!(
        message(validate_update(Reviewed::SchemaApproval, &spec, &changed)),
        "spec: the spec of a PtahSchemaApproval is immutable, the stamps included; create a new one"
    );
}

// --- What an approval names of the plan's source ---

/// An OCI plan of `orders`, bound to the evidence `verified`, and the schema
/// naming it as its plan, whose status holds `now` as its evidence.
fn oci_schema(
    bound: &VerificationEvidence,
    now: &VerificationEvidence,
) -> (PtahSchema, PtahSchemaPlan) {
    let (mut schema, mut plan) = current_schema();
    plan.spec.source = SourceBinding {
        kind: crate::api::source::SourceKind::OCI,
        content_digest: digest(21),
        config_map_uid: None,
        snapshot_name: None,
        location_digest: None,
        commit: None,
        resolved_reference: Some(format!("oci://r.example/app@{}", digest(21))),
        source_policy_uid: None,
        source_policy_digest: None,
        verification_policy_uid: Some("vp".into()),
        verification_policy_digest: Some(digest(22)),
        signer_evidence_digest: crate::api::status::signer_evidence_digest(bound),
        flux_revision: None,
        flux_object_uid: None,
    };
    let mut status = schema.status.take().expect("status");
    status.source = Some(
        serde_json::from_value(json!({
            "kind": "OCI", "contentDigest": digest(21), "revision": "v2@sha256:21",
            "verification": now,
        }))
        .expect("source status"),
    );
    schema.status = Some(status);
    (schema, plan)
}

fn evidence(key: u8) -> VerificationEvidence {
    serde_json::from_value(json!({
        "policy": {"name": "verification", "key": "policy.yaml", "uid": "vp", "digest": digest(22)},
        "keyFingerprint": digest(key),
        "signatureDigest": digest(23),
        "transparencyLogVerified": false,
    }))
    .expect("evidence")
}

fn naming(source: &ApprovedSource) -> PtahSchemaApproval {
    let mut a = schema_approval(
        r("orders", "schema-1"),
        r("plan-1", "plan-uid-1"),
        &digest(15),
    );
    a.spec.source = Some(source.clone());
    a
}

#[test]
fn an_approval_naming_the_plans_source_and_signer_is_admitted() {
    let v = evidence(30);
    let (schema, plan) = oci_schema(&v, &v);
    let named = ApprovedSource::of(&plan.spec.source, Some(&v));
    assert_eq!(named.key_fingerprint, Some(digest(30)));
    assert_eq!(
        validate_schema_approval(&naming(&named), Some(&schema), Some(&plan)),
        Ok(())
    );
    // A ConfigMap plan named as it is.
    let (schema, plan) = current_schema();
    let named = ApprovedSource::of(&plan.spec.source, None);
    assert_eq!(
        validate_schema_approval(&naming(&named), Some(&schema), Some(&plan)),
        Ok(())
    );
}

#[test]
fn an_approval_naming_another_source_is_refused_naming_the_field() {
    let v = evidence(30);
    let (schema, plan) = oci_schema(&v, &v);
    let right = ApprovedSource::of(&plan.spec.source, Some(&v));
    let mut other = right.clone();
    other.content_digest = digest(40);
    let m = message(validate_schema_approval(
        &naming(&other),
        Some(&schema),
        Some(&plan),
    ));
    assert!(
        m.starts_with(&format!(
            "spec.source.contentDigest: the approval names {}, but plan plan-1 was made from {}",
            digest(40),
            digest(21)
        )),
        "{m}"
    );
    let mut other = right.clone();
    other.key_fingerprint = Some(digest(31));
    let m = message(validate_schema_approval(
        &naming(&other),
        Some(&schema),
        Some(&plan),
    ));
    assert!(m.starts_with("spec.source.keyFingerprint:"), "{m}");
    // Naming no signer is not a claim about one.
    let mut unsigned = right;
    unsigned.key_fingerprint = None;
    assert_eq!(
        validate_schema_approval(&naming(&unsigned), Some(&schema), Some(&plan)),
        Ok(())
    );
}

#[test]
fn a_signer_is_admitted_only_while_the_schema_holds_the_evidence_the_plan_bound() {
    let (bound, since) = (evidence(30), evidence(31));
    let (schema, plan) = oci_schema(&bound, &since);
    let named = ApprovedSource::of(&plan.spec.source, Some(&bound));
    let m = message(validate_schema_approval(
        &naming(&named),
        Some(&schema),
        Some(&plan),
    ));
    assert!(
        m.starts_with(&format!(
            "spec.source.keyFingerprint: the approval names {}, but plan plan-1 was made from (none)",
            digest(30)
        )),
        "{m}"
    );
}

#[test]
fn a_migration_approval_naming_another_source_is_refused() {
    let fp = digest(15);
    let m =
        migration(json!({"plan": {"name": "mplan-1", "uid": "mplan-uid-1", "fingerprint": fp}}));
    let plan = migration_plan("mplan-1", "mplan-uid-1", &fp, r("orders", "migration-1"));
    let mut a = migration_approval(r("orders", "migration-1"), r("mplan-1", "mplan-uid-1"), &fp);
    let mut named = ApprovedSource::of(&plan.spec.source, None);
    a.spec.source = Some(named.clone());
    assert_eq!(
        validate_migration_approval(&a, Some(&m), Some(&plan)),
        Ok(())
    );
    named.kind = crate::api::source::SourceKind::Git;
    a.spec.source = Some(named);
    let refused = message(validate_migration_approval(&a, Some(&m), Some(&plan)));
    assert!(
        refused.starts_with(
            "spec.source.kind: the approval names Git, but plan mplan-1 was made from ConfigMap"
        ),
        "{refused}"
    );
}
