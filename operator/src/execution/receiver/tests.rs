//! The receiver's checks, storage and routes, without an API server.

use super::*;
use crate::protocol::receiver::plan_path;
use crate::protocol::result::{ErrorDoc, Outcome};

const OP: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const FP: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn op() -> OperationRef {
    OperationRef {
        operation_id: OP.into(),
        attempt: 1,
        resource: ResourceRef {
            kind: "PtahSchema".into(),
            namespace: "shop".into(),
            name: "orders".into(),
        },
        resource_uid: "res-uid".into(),
        generation: 3,
        input_fingerprint: FP.into(),
        pod_name: Some("ptah-resolve-orders-1111111111111111-abcde".into()),
        pod_uid: Some("pod-uid".into()),
        job_uid: Some("job-uid".into()),
    }
}

fn document(op: Option<OperationRef>) -> ResultDocument {
    let mut d = ResultDocument::new(
        "resolve git",
        op,
        Timestamp::now(),
        Err((
            Outcome::Failed,
            ErrorDoc {
                rule: None,
                file: None,
                message: "failed: network".into(),
            },
        )),
    );
    d.started_at = "2026-01-01T00:00:00Z".into();
    d.finished_at = d.started_at.clone();
    d
}

fn request(body: &[u8], edit: impl FnOnce(&mut http::request::Builder)) -> Request<Bytes> {
    let mut b = Request::builder()
        .method(Method::POST)
        .uri(RESULTS_PATH)
        .header(header::AUTHORIZATION, "Bearer abc")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len().to_string())
        .header(CONTENT_SHA256_HEADER, content_sha256(body));
    edit(&mut b);
    b.body(Bytes::copy_from_slice(body)).unwrap()
}

fn refusal(req: Request<Bytes>) -> Refusal {
    check_request(&req).unwrap_err()
}

/// A service-account key of our own (ES256, as an API server may use) and
/// its JWKS.
fn signer() -> (jsonwebtoken::EncodingKey, JwkSet) {
    use base64::Engine as _;
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = pair.public_key_raw();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwks = serde_json::from_value(serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "k1",
        "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
    }]}))
    .unwrap();
    (
        jsonwebtoken::EncodingKey::from_ec_der(&pair.serialize_der()),
        jwks,
    )
}

/// A token as the API server binds one to a Pod, with `edit` applied to
/// its claims first.
fn pod_token(
    key: &jsonwebtoken::EncodingKey,
    kid: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    let mut claims = serde_json::json!({
        "aud": [RESULT_AUDIENCE],
        "exp": now + 600, "iat": now, "nbf": now,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": "system:serviceaccount:shop:default",
        "kubernetes.io": {
            "namespace": "shop",
            "pod": {"name": "ptah-resolve-orders-1", "uid": "pod-uid"},
            "serviceaccount": {"name": "default", "uid": "sa-uid"},
        },
    });
    edit(&mut claims);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

fn refused_because(r: Result<PodIdentity, TokenCheck>) -> String {
    match r {
        Err(TokenCheck::Refused(r)) => {
            assert_eq!((r.status, r.reason), (StatusCode::UNAUTHORIZED, "Token"));
            r.message
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_pods_token_for_the_receiver_names_its_pod() {
    let (key, jwks) = signer();
    let pod = verify_pod_token(&jwks, &pod_token(&key, "k1", |_| {})).unwrap();
    assert_eq!(
        pod,
        PodIdentity {
            namespace: "shop".into(),
            name: "ptah-resolve-orders-1".into(),
            uid: "pod-uid".into(),
        }
    );
    assert_eq!(
        pod.check("shop", "ptah-resolve-orders-1", "pod-uid"),
        Ok(())
    );
    for (ns, name, uid) in [
        ("other", "ptah-resolve-orders-1", "pod-uid"),
        ("shop", "ptah-resolve-orders-2", "pod-uid"),
        ("shop", "ptah-resolve-orders-1", "other-uid"),
    ] {
        let r = pod.check(ns, name, uid).unwrap_err();
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{r}");
    }
}

#[test]
fn a_token_for_another_audience_expired_unbound_or_unsigned_is_refused() {
    let (key, jwks) = signer();
    let api = pod_token(&key, "k1", |c| {
        c["aud"] = serde_json::json!(["https://kubernetes.default.svc.cluster.local"])
    });
    assert!(refused_because(verify_pod_token(&jwks, &api)).contains("audience"));
    let old = pod_token(&key, "k1", |c| {
        c["exp"] = serde_json::json!(jsonwebtoken::get_current_timestamp() - 3600)
    });
    assert!(refused_because(verify_pod_token(&jwks, &old)).contains("expired"));
    let unbound = pod_token(&key, "k1", |c| {
        c["kubernetes.io"].as_object_mut().unwrap().remove("pod");
    });
    assert!(refused_because(verify_pod_token(&jwks, &unbound)).contains("no Pod"));
    // Another key under the same key id: the signature does not verify.
    let (other, _) = signer();
    let forged = pod_token(&other, "k1", |_| {});
    assert!(refused_because(verify_pod_token(&jwks, &forged)).contains("not signed"));
    assert!(refused_because(verify_pod_token(&jwks, &"0".repeat(64))).contains("not a JWT"));
    // A symmetric "key" chosen by the token is never taken.
    let hs = jsonwebtoken::encode(
        &jsonwebtoken::Header {
            kid: Some("k1".into()),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256)
        },
        &serde_json::json!({"aud": [RESULT_AUDIENCE], "exp": jsonwebtoken::get_current_timestamp() + 60, "sub": "x"}),
        &jsonwebtoken::EncodingKey::from_secret(b"guess").unwrap(),
    )
    .unwrap();
    assert!(verify_pod_token(&jwks, &hs).is_err());
}

#[test]
fn a_token_naming_an_unknown_key_asks_for_the_keys_again() {
    let (key, jwks) = signer();
    assert_eq!(
        verify_pod_token(&jwks, &pod_token(&key, "k2", |_| {})),
        Err(TokenCheck::UnknownKey)
    );
}

#[test]
fn the_key_file_is_created_private_and_read_back() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    let made = TokenKey::load_or_create(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let read = TokenKey::load_or_create(&path).unwrap();
    assert_eq!(made.derive(b"d"), read.derive(b"d"));
    std::fs::write(&path, "short").unwrap();
    let e = TokenKey::load_or_create(&path).unwrap_err().to_string();
    assert!(e.contains("64 hex digits") && !e.contains("short"), "{e}");
    assert_eq!(format!("{read:?}"), "TokenKey(..)");
}

#[test]
fn the_receiver_ca_config_map_holds_the_pem() {
    let cm = receiver_ca_config_map("shop", "PEM");
    assert_eq!(cm.data.unwrap()[RECEIVER_CA_KEY], "PEM");
}

#[test]
fn a_well_formed_request_is_parsed_typed() {
    let body = serde_json::to_vec(&document(Some(op()))).unwrap();
    let r = check_request(&request(&body, |_| {})).unwrap();
    assert_eq!(r.operation, op());
    assert_eq!(r.token, "abc");
    assert_eq!(r.document, document(Some(op())));
}

#[test]
fn malformed_requests_are_refused_naming_what_is_wrong() {
    let body = serde_json::to_vec(&document(Some(op()))).unwrap();
    let headers = |name: &'static str, value: &'static str| {
        move |b: &mut http::request::Builder| {
            b.headers_mut()
                .unwrap()
                .insert(name, header::HeaderValue::from_static(value));
        }
    };
    let r = refusal(request(
        &body,
        headers("x-ptah-content-sha256", "sha256:00"),
    ));
    assert_eq!(
        (r.status, r.reason),
        (StatusCode::BAD_REQUEST, "ContentSHA256")
    );
    assert!(r.message.contains("X-Ptah-Content-SHA256"), "{r}");

    let r = refusal(request(&body, headers("content-length", "12")));
    assert_eq!(
        (r.status, r.reason),
        (StatusCode::BAD_REQUEST, "ContentLength")
    );
    assert!(r.message.contains("Content-Length is 12"), "{r}");

    let r = refusal(request(&body, |b| {
        b.headers_mut().unwrap().remove(header::AUTHORIZATION);
    }));
    assert_eq!((r.status, r.reason), (StatusCode::UNAUTHORIZED, "Token"));

    let r = refusal(request(&body, headers("content-type", "text/plain")));
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let r = refusal(request(&body, |b| {
        *b = std::mem::take(b).method(Method::GET);
    }));
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);

    let no_op = serde_json::to_vec(&document(None)).unwrap();
    let r = refusal(request(&no_op, |_| {}));
    assert_eq!((r.status, r.reason), (StatusCode::BAD_REQUEST, "Document"));
    assert!(r.message.contains("operation is required"), "{r}");

    let r = refusal(request(b"{\"kind\": 1}", |_| {}));
    assert!(r.message.contains("not a result document"), "{r}");

    let mut bad_id = op();
    bad_id.operation_id = "sha256:XYZ".into();
    let r = refusal(request(
        &serde_json::to_vec(&document(Some(bad_id))).unwrap(),
        |_| {},
    ));
    assert!(r.message.contains("operation.operationId"), "{r}");
}

fn claim() -> ActiveOperation {
    serde_json::from_value(serde_json::json!({
        "type": "Resolve",
        "operationID": OP,
        "inputFingerprint": FP,
        "jobName": "ptah-resolve-orders-1111111111111111",
        "jobUID": "job-uid",
        "attempt": 1,
        "startedAt": "2026-01-01T00:00:00Z",
    }))
    .unwrap()
}

#[test]
fn a_result_must_match_the_claim() {
    assert!(check_claim(Some(&claim()), &op()).is_ok());
    let r = check_claim(None, &op()).unwrap_err();
    assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "NotClaimed"));
    for (edit, field) in [
        (
            Box::new(|o: &mut OperationRef| o.input_fingerprint = OP.into())
                as Box<dyn Fn(&mut OperationRef)>,
            "inputFingerprint",
        ),
        (Box::new(|o| o.attempt = 2), "attempt"),
        (Box::new(|o| o.job_uid = Some("other".into())), "jobUid"),
        (Box::new(|o| o.job_uid = None), "jobUid"),
        (Box::new(|o| o.operation_id = FP.into()), "operationId"),
    ] {
        let mut o = op();
        edit(&mut o);
        let r = check_claim(Some(&claim()), &o).unwrap_err();
        assert_eq!(r.status, StatusCode::CONFLICT);
        assert!(r.message.contains(field), "{field}: {r}");
    }
    let mut unrecorded = claim();
    unrecorded.job_uid = None;
    let mut o = op();
    o.job_uid = None;
    assert!(check_claim(Some(&unrecorded), &o).is_ok());
}

#[test]
fn the_pod_must_be_the_jobs() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "p", "uid": "pod-uid",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                "name": "ptah-resolve-orders-1111111111111111", "uid": "job-uid"}]
        }
    }))
    .unwrap();
    let job = "ptah-resolve-orders-1111111111111111";
    assert!(check_pod(&pod, &op(), job).is_ok());
    assert!(check_pod(&pod, &op(), "another-job").is_err());
    let mut o = op();
    o.pod_uid = Some("other".into());
    assert!(
        check_pod(&pod, &o, job)
            .unwrap_err()
            .message
            .contains("podUid")
    );
    let mut o = op();
    o.job_uid = Some("other".into());
    assert!(check_pod(&pod, &o, job).is_err());
}

#[test]
fn a_large_result_is_chunked_and_reassembled_checked() {
    let mut doc = document(Some(op()));
    // Well over two chunks of document.
    doc.error.as_mut().unwrap().message = "é".repeat(CHUNK_BYTES + 10);
    let body = serde_json::to_vec(&doc).unwrap();
    let owner = OwnerReference::default();
    let at = Timestamp::now();
    let (index, chunks) = result_objects("shop", &owner, &op(), &body, at).unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(
        index.metadata.name.as_deref(),
        Some("ptah-result-1111111111111111111111111111111111111111111111111111111111111111-1")
    );
    for cm in chunks.iter().chain([&index]) {
        let size: usize = cm
            .binary_data
            .as_ref()
            .unwrap()
            .values()
            .map(|b| b.0.len())
            .sum();
        assert!(size <= CHUNK_BYTES);
        assert_eq!(cm.immutable, Some(true));
        let labels = cm.metadata.labels.as_ref().unwrap();
        assert!(labels.values().all(|v| v.len() <= 63));
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()[ANNOTATION_OPERATION_ID],
            OP
        );
    }
    let stored = assemble(&index, &chunks).unwrap();
    assert_eq!(stored.document, doc);
    assert_eq!(stored.pod_uid.as_deref(), Some("pod-uid"));
    assert_eq!(stored.job_uid.as_deref(), Some("job-uid"));
    assert_eq!(stored.received_at, Time(at));

    // A chunk altered, or lost, is found.
    let mut altered = chunks.clone();
    let bytes = &mut altered[1]
        .binary_data
        .as_mut()
        .unwrap()
        .get_mut("chunk")
        .unwrap()
        .0;
    bytes[0] ^= 1;
    let e = assemble(&index, &altered).unwrap_err().to_string();
    assert!(e.contains("SHA-256"), "{e}");
    let e = assemble(&index, &chunks[..1]).unwrap_err().to_string();
    assert!(e.contains("3 chunks recorded, 2 found"), "{e}");
}

#[test]
fn a_small_result_is_one_object() {
    let body = serde_json::to_vec(&document(Some(op()))).unwrap();
    let (index, chunks) = result_objects(
        "shop",
        &OwnerReference::default(),
        &op(),
        &body,
        Timestamp::now(),
    )
    .unwrap();
    assert!(chunks.is_empty());
    assert_eq!(
        assemble(&index, &[]).unwrap().document,
        document(Some(op()))
    );
}

fn plan_request(path: &str, edit: impl FnOnce(&mut http::request::Builder)) -> Request<Bytes> {
    let mut b = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(header::AUTHORIZATION, "Bearer abc")
        .header(POD_NAME_HEADER, "ptah-apply-orders-1111111111111111-abcde")
        .header(POD_UID_HEADER, "pod-uid");
    edit(&mut b);
    b.body(Bytes::new()).unwrap()
}

fn plan_op() -> PlanRequest {
    PlanRequest {
        resource: op().resource,
        operation_id: OP.into(),
        attempt: 1,
        token: "abc".into(),
        pod_name: "ptah-apply-orders-1111111111111111-abcde".into(),
        pod_uid: "pod-uid".into(),
    }
}

#[test]
fn a_plan_request_is_parsed_from_its_path_and_headers() {
    let path = plan_path(&op().resource, OP, 1);
    assert_eq!(path, format!("/v1/plans/shop/PtahSchema/orders/{OP}/1"));
    assert_eq!(
        check_plan_request(&plan_request(&path, |_| {})).unwrap(),
        plan_op()
    );
}

#[test]
fn malformed_plan_requests_are_refused_naming_what_is_wrong() {
    let path = plan_path(&op().resource, OP, 1);
    let refusal = |req| check_plan_request(&req).unwrap_err();

    let r = refusal(plan_request(&path, |b| {
        b.headers_mut().unwrap().remove(header::AUTHORIZATION);
    }));
    assert_eq!((r.status, r.reason), (StatusCode::UNAUTHORIZED, "Token"));

    let r = refusal(plan_request(&path, |b| {
        *b = std::mem::take(b).method(Method::POST);
    }));
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);

    let r = refusal(plan_request(&path, |b| {
        b.headers_mut().unwrap().remove(POD_UID_HEADER);
    }));
    assert_eq!((r.status, r.reason), (StatusCode::BAD_REQUEST, "Pod"));
    assert!(r.message.contains("X-Ptah-Pod-UID"), "{r}");

    let r = refusal(plan_request(&path, |b| {
        b.headers_mut().unwrap().remove(POD_NAME_HEADER);
    }));
    assert!(r.message.contains("X-Ptah-Pod-Name"), "{r}");

    let r = refusal(plan_request("/v1/plans/shop/PtahSchema/orders", |_| {}));
    assert_eq!((r.status, r.reason), (StatusCode::NOT_FOUND, "Path"));
    let r = refusal(plan_request(
        "/v1/plans/shop/PtahSchema/orders/sha256:XYZ/1",
        |_| {},
    ));
    assert!(r.message.contains("operation id"), "{r}");
    let r = refusal(plan_request(
        &format!("/v1/plans/shop/PtahSchema/orders/{OP}/0"),
        |_| {},
    ));
    assert!(r.message.contains("attempt"), "{r}");
    let r = refusal(plan_request(
        &format!("/v1/plans/Shop_/PtahSchema/orders/{OP}/1"),
        |_| {},
    ));
    assert!(r.message.contains("namespace and name"), "{r}");
}

fn apply_claim() -> ActiveOperation {
    let mut c = claim();
    c.type_ = OperationType::Apply;
    c.plan_name = Some("orders-0123456789ab".into());
    c.plan_uid = Some("plan-uid".into());
    c.plan_fingerprint = Some(FP.into());
    c
}

fn summary() -> SchemaPlanSummary {
    serde_json::from_value(serde_json::json!({
        "name": "orders-0123456789ab",
        "uid": "plan-uid",
        "fingerprint": FP,
        "contentDigest": OP,
    }))
    .unwrap()
}

#[test]
fn a_plan_is_handed_out_only_under_its_apply_claim() {
    let claimed = check_apply_claim(Some(&apply_claim()), &plan_op()).unwrap();
    assert_eq!(claimed.name, "orders-0123456789ab");
    assert_eq!(claimed.job_uid.as_deref(), Some("job-uid"));
    assert_eq!(
        check_current_plan(Some(&summary()), &claimed).unwrap(),
        OP.to_string()
    );

    let r = check_apply_claim(None, &plan_op()).unwrap_err();
    assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "NotClaimed"));
    for (edit, field) in [
        (
            Box::new(|c: &mut ActiveOperation| c.type_ = OperationType::Observe)
                as Box<dyn Fn(&mut ActiveOperation)>,
            "not an Apply",
        ),
        (Box::new(|c| c.attempt = 2), "attempt 1"),
        (Box::new(|c| c.operation_id = FP.into()), "operationID"),
        (Box::new(|c| c.plan_name = None), "planName"),
        (Box::new(|c| c.plan_fingerprint = None), "planFingerprint"),
        (Box::new(|c| c.job_name = None), "jobName"),
    ] {
        let mut c = apply_claim();
        edit(&mut c);
        let r = check_apply_claim(Some(&c), &plan_op()).unwrap_err();
        assert_eq!(r.status, StatusCode::CONFLICT);
        assert!(r.message.contains(field), "{field}: {r}");
    }
}

#[test]
fn status_plan_must_be_the_claims_plan_with_its_digest() {
    let claimed = check_apply_claim(Some(&apply_claim()), &plan_op()).unwrap();
    let r = check_current_plan(None, &claimed).unwrap_err();
    assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "PlanMoved"));
    for (edit, field) in [
        (
            Box::new(|p: &mut SchemaPlanSummary| p.name = "orders-ffffffffffff".into())
                as Box<dyn Fn(&mut SchemaPlanSummary)>,
            "status.plan.name",
        ),
        (
            Box::new(|p| p.fingerprint = OP.into()),
            "status.plan.fingerprint",
        ),
        (Box::new(|p| p.uid = "other".into()), "status.plan.uid"),
        (Box::new(|p| p.content_digest = None), "contentDigest"),
    ] {
        let mut p = summary();
        edit(&mut p);
        let r = check_current_plan(Some(&p), &claimed).unwrap_err();
        assert_eq!((r.status, r.reason), (StatusCode::CONFLICT, "PlanMoved"));
        assert!(r.message.contains(field), "{field}: {r}");
    }
    // A claim that records no plan UID is bound by name and fingerprint.
    let mut c = apply_claim();
    c.plan_uid = None;
    let claimed = check_apply_claim(Some(&c), &plan_op()).unwrap();
    let mut p = summary();
    p.uid = "other".into();
    assert!(check_current_plan(Some(&p), &claimed).is_ok());
}

#[test]
fn the_plan_goes_only_to_the_claims_jobs_pod() {
    let pod = |uid: &str, job: &str, job_uid: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "p", "uid": uid,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                    "name": job, "uid": job_uid}]
            }
        }))
        .unwrap()
    };
    let job = "ptah-resolve-orders-1111111111111111";
    let claimed = check_apply_claim(Some(&apply_claim()), &plan_op()).unwrap();
    assert!(check_plan_pod(&pod("pod-uid", job, "job-uid"), &plan_op(), &claimed).is_ok());
    let r = check_plan_pod(&pod("other", job, "job-uid"), &plan_op(), &claimed).unwrap_err();
    assert!(r.message.contains("X-Ptah-Pod-UID"), "{r}");
    let r = check_plan_pod(
        &pod("pod-uid", "another-job", "job-uid"),
        &plan_op(),
        &claimed,
    )
    .unwrap_err();
    assert_eq!(r.reason, "PodMismatch");
    assert!(check_plan_pod(&pod("pod-uid", job, "other"), &plan_op(), &claimed).is_err());
}

#[test]
fn a_plan_that_does_not_read_back_is_refused_naming_the_chunk_and_an_api_failure_retried() {
    let r = plan_refusal(&PlanError::ChunkAltered {
        plan: "orders-0123456789ab".into(),
        chunk: "orders-0123456789ab-001".into(),
        reason: "digest".into(),
    });
    assert_eq!(
        (r.status, r.reason),
        (StatusCode::CONFLICT, REASON_PLAN_REFUSED)
    );
    assert!(r.message.contains("orders-0123456789ab-001"), "{r}");
    let r = plan_refusal(&PlanError::Deleting {
        kind: "PtahSchemaPlan",
        name: "orders-0123456789ab".into(),
    });
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
}
