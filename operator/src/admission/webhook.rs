//! The HTTP side of the approval webhooks: AdmissionReview v1 in, the
//! review of [`super`] out, with the reads validation needs made by the
//! manager's client. A body that is no AdmissionReview v1 gets a 400 (the
//! API server then fails the request closed, as `failurePolicy: Fail` says).

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND,
};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::config::{MUTATE_PATH, VALIDATE_PATH};
use super::{Observed, StampKey, Subject, Validation, decide, review_mutation, review_validation};
use crate::api::{PtahMigration, PtahMigrationPlan, PtahSchema, PtahSchemaPlan};
use crate::server::Handler;

/// A read validation could not make: the request is refused (fail closed),
/// and the API server's message says which object.
#[derive(Debug, thiserror::Error)]
#[error(
    "reading {kind} {name} in namespace {namespace} failed, so the object was not admitted; try again: {source}"
)]
pub struct ReadError {
    kind: String,
    name: String,
    namespace: String,
    source: kube::Error,
}

/// Serves POST `/admission/mutate` and `/admission/validate`; the client
/// reads the resources and plans that approvals and acknowledgments name,
/// and `key` signs every stamp.
pub fn handler(client: Client, key: Arc<StampKey>) -> Handler {
    Arc::new(move |req| {
        let (client, key) = (client.clone(), key.clone());
        Box::pin(async move { serve(&client, &key, req).await })
    })
}

async fn serve(client: &Client, key: &StampKey, req: Request<Bytes>) -> Response<Bytes> {
    let path = req.uri().path();
    if path != MUTATE_PATH && path != VALIDATE_PATH {
        return plain(StatusCode::NOT_FOUND, "no such path");
    }
    if req.method() != Method::POST {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "admission reviews are POSTed",
        );
    }
    let request = match parse(req.body()) {
        Ok(request) => request,
        Err(reason) => return plain(StatusCode::BAD_REQUEST, &reason),
    };
    let response = if path == MUTATE_PATH {
        review_mutation(&request, &Time(k8s_openapi::jiff::Timestamp::now()), key)
    } else {
        validate(client, &request).await
    };
    if !response.allowed {
        tracing::info!(
            kind = %request.kind.kind,
            namespace = request.namespace.as_deref().unwrap_or_default(),
            name = %request.name,
            user = request.user_info.username.as_deref().unwrap_or_default(),
            reason = %response.result.message,
            "admission refused"
        );
    }
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => {
            let mut r = Response::new(Bytes::from(body));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("encoding the AdmissionReview: {e}"),
        ),
    }
}

/// The request of an AdmissionReview v1, or why the body is not one.
fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    let not_review = |e: String| format!("the body is not an AdmissionReview: {e}");
    let document: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| not_review(e.to_string()))?;
    // The type members are flattened into the review, where serde loses
    // their path: checked by name first.
    for member in ["apiVersion", "kind"] {
        if !document[member].is_string() {
            return Err(not_review(format!("{member}: missing, or not a string")));
        }
    }
    // serde's reason with the path of the member it is about (`request.uid: …`).
    let review: AdmissionReview<DynamicObject> =
        crate::protocol::from_value(document).map_err(not_review)?;
    if review.types.api_version != META_API_VERSION_V1 || review.types.kind != META_KIND {
        return Err(format!(
            "apiVersion/kind: expected {META_API_VERSION_V1} {META_KIND}, got {} {}",
            review.types.api_version, review.types.kind
        ));
    }
    review
        .try_into()
        .map_err(|_| "request: the AdmissionReview carries no request".to_owned())
}

async fn validate(client: &Client, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    match review_validation(request) {
        Validation::Answer(response) => *response,
        Validation::Read { namespace, subject } => match read(client, &namespace, &subject).await {
            Ok(observed) => decide(request, &subject, &observed),
            Err(e) => AdmissionResponse::from(request).deny(e),
        },
    }
}

async fn get<K>(client: &Client, namespace: &str, name: &str) -> Result<Option<K>, ReadError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| ReadError {
            kind: K::kind(&()).into_owned(),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            source,
        })
}

/// Reads what the subject names, in its namespace.
async fn read(client: &Client, namespace: &str, subject: &Subject) -> Result<Observed, ReadError> {
    let (resource, plan) = subject.reads();
    let mut observed = Observed::default();
    match subject {
        Subject::SchemaApproval(_) => {
            observed.schema = get::<PtahSchema>(client, namespace, resource).await?;
            if let Some(plan) = plan {
                observed.schema_plan = get::<PtahSchemaPlan>(client, namespace, plan).await?;
            }
        }
        Subject::MigrationApproval(_) | Subject::RunAcknowledgment(_) => {
            observed.migration = get::<PtahMigration>(client, namespace, resource).await?;
            if let Some(plan) = plan {
                observed.migration_plan = get::<PtahMigrationPlan>(client, namespace, plan).await?;
            }
        }
    }
    Ok(observed)
}

fn plain(status: StatusCode, message: &str) -> Response<Bytes> {
    let mut r = Response::new(Bytes::from(format!("{message}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_is_no_admission_review_v1_is_malformed() {
        for (body, expected) in [
            (&b"not json"[..], "the body is not an AdmissionReview"),
            (
                br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#,
                "apiVersion/kind: expected admission.k8s.io/v1 AdmissionReview",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
                "request: the AdmissionReview carries no request",
            ),
        ] {
            let err = parse(body).err().unwrap_or_default();
            assert!(err.starts_with(expected), "{err}");
        }
    }

    fn post(path: &str, body: serde_json::Value) -> Request<Bytes> {
        Request::post(path)
            .body(Bytes::from(body.to_string()))
            .expect("request")
    }

    /// A client that is never reached: these reviews need no read.
    fn unreachable_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("uri"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn the_handler_answers_reviews_as_json_and_malformed_bodies_with_400() {
        let handler = handler(
            unreachable_client(),
            Arc::new(StampKey::of(
                &crate::execution::receiver::TokenKey::generate(),
            )),
        );
        let malformed = handler(post("/admission/validate", serde_json::json!({}))).await;
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        let wrong_path = handler(post("/admission/other", serde_json::json!({}))).await;
        assert_eq!(wrong_path.status(), StatusCode::NOT_FOUND);

        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "req-uid-1",
                "kind": {"group": "operator.ptah.run", "version": "v1alpha1", "kind": "PtahMigrationRunAcknowledgment"},
                "resource": {"group": "operator.ptah.run", "version": "v1alpha1", "resource": "ptahmigrationrunacknowledgments"},
                "name": "ack",
                "namespace": "orders",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"spec": {"migrationRef": {"name": "orders", "uid": "m"}, "operationID": "x"}},
                "dryRun": false
            }
        });
        let response = handler(post("/admission/mutate", review.clone())).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        let out: serde_json::Value = serde_json::from_slice(response.body()).expect("json");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["kind"], "AdmissionReview");
        assert_eq!(out["response"]["uid"], "req-uid-1");
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patchType"], "JSONPatch");

        // Unstamped at validation: refused before any read.
        let response = handler(post("/admission/validate", review)).await;
        let out: serde_json::Value = serde_json::from_slice(response.body()).expect("json");
        assert_eq!(out["response"]["allowed"], false);
        let message = out["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.starts_with("spec.acknowledgedBy: not stamped"),
            "{message}"
        );
    }

    /// Admission (issue 26): the body of any bytes, and reviews with one
    /// member broken, never panic; a refusal names the member.
    mod parse_props {
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use super::super::parse;

        fn review() -> Value {
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "req-uid-1",
                    "kind": {"group": "operator.ptah.run", "version": "v1alpha1", "kind": "PtahSchemaApproval"},
                    "resource": {"group": "operator.ptah.run", "version": "v1alpha1", "resource": "ptahschemaapprovals"},
                    "name": "approve",
                    "namespace": "orders",
                    "operation": "CREATE",
                    "userInfo": {"username": "alice"},
                    "object": {"spec": {}},
                    "dryRun": false
                }
            })
        }

        const MEMBERS: &[&str] = &[
            "apiVersion",
            "kind",
            "request",
            "request.uid",
            "request.kind",
            "request.kind.kind",
            "request.resource",
            "request.name",
            "request.namespace",
            "request.operation",
            "request.userInfo",
            "request.userInfo.username",
            "request.object",
            "request.dryRun",
        ];

        fn value() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<i64>().prop_map(Value::from),
                any::<bool>().prop_map(Value::Bool),
                ".{0,12}".prop_map(Value::String),
                Just(json!([1])),
                Just(json!({"a": 1})),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            #[test]
            fn a_body_of_any_bytes_is_refused_as_no_review(
                body in prop::collection::vec(any::<u8>(), 0..300),
            ) {
                if let Err(reason) = parse(&body) {
                    prop_assert!(reason.starts_with("the body is not an AdmissionReview"), "{reason}");
                }
            }

            #[test]
            fn a_review_with_a_broken_member_is_refused_naming_it(
                member in prop::sample::select(MEMBERS),
                broken in value(),
            ) {
                let mut doc = review();
                prop_assert!(parse(doc.to_string().as_bytes()).is_ok());
                let mut at = &mut doc;
                for key in member.split('.') {
                    at = &mut at[key];
                }
                *at = broken;
                if let Err(reason) = parse(doc.to_string().as_bytes()) {
                    let last = member.rsplit('.').next().unwrap_or(member);
                    let top = member.split('.').next().unwrap_or(member);
                    prop_assert!(reason.contains(last) || reason.contains(top), "{reason} is not about {member}");
                }
            }
        }
    }
}
