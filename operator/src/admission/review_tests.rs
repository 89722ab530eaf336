//! The reviews as the API server sends them: AdmissionReview v1 JSON in,
//! the response's verdict, patch and warnings out.

use kube::core::admission::AdmissionReview;
use serde_json::json;

use super::*;

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_767_225_600).expect("time"))
}

fn key() -> StampKey {
    StampKey::of(&crate::execution::receiver::TokenKey::generate())
}

fn request(
    kind: &str,
    operation: &str,
    object: Value,
    old: Option<Value>,
) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-uid-1",
            "kind": {"group": "operator.ptah.run", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "operator.ptah.run", "version": "v1alpha1", "resource": "x"},
            "name": "approve",
            "namespace": "orders",
            "operation": operation,
            "userInfo": {"username": "alice", "uid": "alice-uid", "groups": ["dba"]},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    }))
    .expect("review");
    review.try_into().expect("request")
}

fn approval(spec: Value) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchemaApproval",
        "metadata": {"name": "approve", "namespace": "orders"},
        "spec": spec
    })
}

fn refs() -> Value {
    json!({
        "schemaRef": {"name": "orders", "uid": "schema-1"},
        "planRef": {"name": "plan-1", "uid": "plan-uid-1"},
        "planFingerprint": digest(15)
    })
}

fn stamped() -> Value {
    let mut spec = refs();
    spec["approver"] = json!({"username": "alice", "uid": "alice-uid", "groups": ["dba"]});
    spec["approvedAt"] = json!("2026-01-01T00:00:00Z");
    spec["mutationRequestUID"] = json!("req-uid-0");
    spec
}

#[test]
fn the_mutating_review_of_a_creation_patches_in_the_stamps() {
    let mut spec = refs();
    spec["approver"] = json!({"username": "mallory"});
    let req = request("PtahSchemaApproval", "CREATE", approval(spec), None);
    let key = key();
    let response = review_mutation(&req, &now(), &key);
    assert!(response.allowed);
    assert_eq!(response.uid, "req-uid-1");
    let patch: json_patch::Patch =
        serde_json::from_slice(response.patch.as_deref().expect("a patch")).expect("json patch");
    let mut object = approval(refs());
    json_patch::patch(&mut object, &patch).expect("applies");
    assert_eq!(
        object["spec"]["approver"],
        json!({"username": "alice", "uid": "alice-uid", "groups": ["dba"]})
    );
    assert_eq!(object["spec"]["approvedAt"], json!("2026-01-01T00:00:00Z"));
    assert_eq!(object["spec"]["mutationRequestUID"], json!("req-uid-1"));
    // Signed so that the manager, reading the stored object back, verifies
    // it; and a forged approver breaks the signature.
    let mut stored: PtahSchemaApproval = serde_json::from_value(object).expect("typed");
    assert_eq!(
        key.verify("PtahSchemaApproval", "orders", &stored.spec),
        Ok(())
    );
    assert_eq!(
        key.verify("PtahSchemaApproval", "elsewhere", &stored.spec),
        Err(Unsigned::Mismatch)
    );
    stored.spec.approver.as_mut().expect("approver").username = "mallory".into();
    assert_eq!(
        key.verify("PtahSchemaApproval", "orders", &stored.spec),
        Err(Unsigned::Mismatch)
    );
    // The patch type goes with the patch.
    let wire = serde_json::to_value(response.into_review()).expect("json");
    assert_eq!(wire["response"]["patchType"], json!("JSONPatch"));
    assert_eq!(wire["apiVersion"], json!("admission.k8s.io/v1"));
}

#[test]
fn the_mutating_review_of_an_update_changes_nothing() {
    let req = request(
        "PtahSchemaApproval",
        "UPDATE",
        approval(stamped()),
        Some(approval(stamped())),
    );
    let response = review_mutation(&req, &now(), &key());
    assert!(response.allowed);
    assert_eq!(response.patch, None);
}

#[test]
fn a_review_of_an_unexpected_kind_is_allowed_with_a_warning() {
    let req = request("PtahSchema", "CREATE", json!({"spec": {}}), None);
    for response in [
        review_mutation(&req, &now(), &key()),
        match review_validation(&req) {
            Validation::Answer(r) => *r,
            Validation::Read { .. } => panic!("nothing to read for an unexpected kind"),
        },
    ] {
        assert!(response.allowed);
        assert_eq!(response.patch, None);
        let warnings = response.warnings.unwrap_or_default();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("operator.ptah.run/v1alpha1 PtahSchema was allowed unreviewed"),
            "{warnings:?}"
        );
    }
}

#[test]
fn the_mutating_review_of_an_anonymous_creation_is_denied() {
    let mut req = request("PtahSchemaApproval", "CREATE", approval(refs()), None);
    req.user_info.username = None;
    let response = review_mutation(&req, &now(), &key());
    assert!(!response.allowed);
    assert!(response.result.message.starts_with("userInfo.username:"));
}

fn answer(v: Validation) -> AdmissionResponse {
    match v {
        Validation::Answer(r) => *r,
        Validation::Read { .. } => panic!("expected an answer without reads"),
    }
}

#[test]
fn the_validating_review_of_a_creation_reads_what_the_approval_names() {
    let req = request("PtahSchemaApproval", "CREATE", approval(stamped()), None);
    match review_validation(&req) {
        Validation::Read { namespace, subject } => {
            assert_eq!(namespace, "orders");
            assert_eq!(subject.reads(), ("orders", Some("plan-1")));
        }
        Validation::Answer(r) => panic!("answered without reading: {:?}", r.result.message),
    }
}

#[test]
fn the_validating_review_of_an_unstamped_or_forged_creation_is_denied_before_any_read() {
    let req = request("PtahSchemaApproval", "CREATE", approval(refs()), None);
    let response = answer(review_validation(&req));
    assert!(!response.allowed);
    assert!(
        response
            .result
            .message
            .starts_with("spec.approver: not stamped")
    );
    let mut forged = stamped();
    forged["approver"] = json!({"username": "mallory"});
    let req = request("PtahSchemaApproval", "CREATE", approval(forged), None);
    let response = answer(review_validation(&req));
    assert!(!response.allowed);
    assert!(
        response
            .result
            .message
            .starts_with("spec.approver: names mallory")
    );
}

#[test]
fn the_validating_review_of_a_malformed_object_names_the_kind() {
    let mut spec = stamped();
    spec["planFingerprint"] = json!(42);
    let req = request("PtahSchemaApproval", "CREATE", approval(spec), None);
    let response = answer(review_validation(&req));
    assert!(!response.allowed);
    assert!(
        response
            .result
            .message
            .starts_with("object: not a well-formed PtahSchemaApproval"),
        "{}",
        response.result.message
    );
}

#[test]
fn the_validating_review_of_an_update_admits_metadata_changes_and_refuses_spec_changes() {
    let mut labelled = approval(stamped());
    labelled["metadata"]["labels"] = json!({"team": "dba"});
    let req = request(
        "PtahSchemaApproval",
        "UPDATE",
        labelled,
        Some(approval(stamped())),
    );
    assert!(answer(review_validation(&req)).allowed);
    let mut restamped = stamped();
    restamped["approver"] = json!({"username": "mallory"});
    let req = request(
        "PtahSchemaApproval",
        "UPDATE",
        approval(restamped),
        Some(approval(stamped())),
    );
    let response = answer(review_validation(&req));
    assert!(!response.allowed);
    assert!(
        response
            .result
            .message
            .starts_with("spec: the spec of a PtahSchemaApproval is immutable")
    );
}

#[test]
fn the_decision_refuses_an_approval_of_a_plan_that_was_replaced() {
    let req = request("PtahSchemaApproval", "CREATE", approval(stamped()), None);
    let Validation::Read { subject, .. } = review_validation(&req) else {
        panic!("expected reads");
    };
    let schema: PtahSchema = serde_json::from_value(json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchema",
        "metadata": {"name": "orders", "namespace": "orders", "uid": "schema-1"},
        "spec": {
            "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "orders"},
            "source": {"configMap": {"name": "orders-schema"}}
        },
        "status": {"plan": {"name": "plan-2", "uid": "plan-uid-2", "fingerprint": digest(16)}}
    }))
    .expect("schema");
    let observed = Observed {
        schema: Some(schema),
        ..Default::default()
    };
    let response = decide(&req, &subject, &observed);
    assert!(!response.allowed);
    assert!(
        response.result.message.contains(
            "is not the current plan of PtahSchema orders (current: plan-2 (UID plan-uid-2))"
        ),
        "{}",
        response.result.message
    );
}
