//! Stage 3, the decision, at the API server: the admission webhooks of
//! PtahSchemaApproval, PtahMigrationApproval and
//! PtahMigrationRunAcknowledgment. The mutating webhook stamps who decided,
//! when, and in which request ([`stamp`]); the validating webhook admits an
//! approval only of the resource's current plan, exactly, and an
//! acknowledgment only of its unresolved run ([`validate`]). So `kubectl
//! ptah approve` approves nothing if the plan it showed was replaced, and the
//! journal's ApprovalAccepted and RunAcknowledged entries carry an identity
//! no client wrote.
//!
//! The review logic here is pure: [`review_mutation`] answers a request,
//! [`review_validation`] says what to read and [`decide`] answers once it is
//! read. [`handler`] serves both over HTTPS with a `kube::Client`;
//! [`config::webhook_configurations`] is how the API server is told to call it.

pub mod config;
pub mod signature;
pub mod stamp;
pub mod validate;
mod webhook;

use crate::protocol::from_value;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::{
    PtahMigration, PtahMigrationApproval, PtahMigrationApprovalSpec, PtahMigrationPlan,
    PtahMigrationRunAcknowledgment, PtahMigrationRunAcknowledgmentSpec, PtahSchema,
    PtahSchemaApproval, PtahSchemaApprovalSpec, PtahSchemaPlan,
};

pub use config::webhook_configurations;
pub use signature::{STAMP_SIGNATURE_FIELD, StampKey, Unsigned};
pub use stamp::{Reviewed, StampError, identity_of, stamp};
pub use validate::{
    Refusal, validate_acknowledgment, validate_migration_approval, validate_schema_approval,
    validate_stamp, validate_update,
};
pub use webhook::{ReadError, handler};

/// The warning of a review of a kind these webhooks do not review: the
/// configuration never sends one, so it is allowed and said.
fn unexpected_kind<T: kube::Resource>(req: &AdmissionRequest<T>) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(req);
    response.warnings = Some(vec![format!(
        "ptah-operator-approvals reviews PtahSchemaApproval, PtahMigrationApproval and \
         PtahMigrationRunAcknowledgment only; {}/{} {} was allowed unreviewed",
        req.kind.group, req.kind.version, req.kind.kind
    )]);
    response
}

fn spec_of(object: Option<&DynamicObject>) -> Option<&Value> {
    object.and_then(|o| o.data.get("spec"))
}

/// The mutating review: on CREATE of a reviewed kind, the stamp, signed
/// with `key`; anything else passes unchanged.
pub fn review_mutation(
    req: &AdmissionRequest<DynamicObject>,
    now: &Time,
    key: &StampKey,
) -> AdmissionResponse {
    let Some(kind) = Reviewed::from_gvk(&req.kind) else {
        return unexpected_kind(req);
    };
    // Spec is immutable after creation (CEL), so only a creation is stamped.
    if req.operation != Operation::Create {
        return AdmissionResponse::from(req);
    }
    let null = Value::Null;
    let object = req.object.as_ref().map_or(&null, |o| &o.data);
    let signed = stamp(kind, object, &req.user_info, &req.uid, now)
        .map_err(|e| e.to_string())
        .and_then(|patch| sign(kind, req.namespace.as_deref(), object, patch, key));
    match signed {
        Ok(patch) => match AdmissionResponse::from(req).with_patch(patch) {
            Ok(response) => response,
            Err(e) => AdmissionResponse::from(req).deny(e),
        },
        Err(e) => AdmissionResponse::from(req).deny(e),
    }
}

/// `patch` with one more operation: the signature of the spec it makes, as
/// the kind's type reads it back (so the manager, reading the stored object,
/// signs the same bytes).
fn sign(
    kind: Reviewed,
    namespace: Option<&str>,
    object: &Value,
    mut patch: json_patch::Patch,
    key: &StampKey,
) -> Result<json_patch::Patch, String> {
    let namespace = namespace.ok_or_else(|| {
        format!(
            "metadata.namespace: a {} is namespaced; the review names no namespace",
            kind.kind()
        )
    })?;
    let mut stamped = object.clone();
    json_patch::patch(&mut stamped, &patch).map_err(|e| format!("spec: {e}"))?;
    // Only the spec is read back; metadata of a creation may lack a name.
    let spec = stamped.get("spec").cloned().unwrap_or(Value::Null);
    let not_typed = |e: String| format!("spec: not a well-formed {}: {e}", kind.kind());
    let signature = match kind {
        Reviewed::SchemaApproval => {
            from_value::<PtahSchemaApprovalSpec>(spec).map(|s| key.sign(kind.kind(), namespace, &s))
        }
        Reviewed::MigrationApproval => from_value::<PtahMigrationApprovalSpec>(spec)
            .map(|s| key.sign(kind.kind(), namespace, &s)),
        Reviewed::RunAcknowledgment => from_value::<PtahMigrationRunAcknowledgmentSpec>(spec)
            .map(|s| key.sign(kind.kind(), namespace, &s)),
    }
    .map_err(not_typed)?;
    patch
        .0
        .push(json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["spec", STAMP_SIGNATURE_FIELD]),
            value: Value::String(signature),
        }));
    Ok(patch)
}

/// A created object to validate, typed, with what must be read for it.
#[derive(Debug, Clone)]
pub enum Subject {
    /// Read the PtahSchema and the PtahSchemaPlan it names.
    SchemaApproval(Box<PtahSchemaApproval>),
    /// Read the PtahMigration and the PtahMigrationPlan it names.
    MigrationApproval(Box<PtahMigrationApproval>),
    /// Read the PtahMigration it names.
    RunAcknowledgment(Box<PtahMigrationRunAcknowledgment>),
}

impl Subject {
    /// The namespaced names to read: the resource, and its plan if any.
    pub fn reads(&self) -> (&str, Option<&str>) {
        match self {
            Subject::SchemaApproval(a) => (&a.spec.schema_ref.name, Some(&a.spec.plan_ref.name)),
            Subject::MigrationApproval(a) => {
                (&a.spec.migration_ref.name, Some(&a.spec.plan_ref.name))
            }
            Subject::RunAcknowledgment(a) => (&a.spec.migration_ref.name, None),
        }
    }
}

/// What the validating review needs next.
#[derive(Debug, Clone)]
pub enum Validation {
    /// The answer, with nothing to read.
    Answer(Box<AdmissionResponse>),
    /// Read what the subject names in `namespace`, then [`decide`].
    Read {
        /// The namespace of the request.
        namespace: String,
        /// The object under review.
        subject: Subject,
    },
}

fn typed<K: DeserializeOwned>(object: &DynamicObject, kind: Reviewed) -> Result<K, String> {
    serde_json::to_value(object)
        .map_err(|e| e.to_string())
        .and_then(from_value)
        .map_err(|e| format!("object: not a well-formed {}: {e}", kind.kind()))
}

/// The validating review up to the reads: unexpected kinds pass with a
/// warning, an update must keep the spec, a creation must carry the
/// requester's stamps and is then checked against what it names.
pub fn review_validation(req: &AdmissionRequest<DynamicObject>) -> Validation {
    let Some(kind) = Reviewed::from_gvk(&req.kind) else {
        return Validation::Answer(Box::new(unexpected_kind(req)));
    };
    let deny =
        |reason: String| Validation::Answer(Box::new(AdmissionResponse::from(req).deny(reason)));
    match req.operation {
        Operation::Create => {}
        Operation::Update => {
            let null = Value::Null;
            let old = spec_of(req.old_object.as_ref()).unwrap_or(&null);
            let new = spec_of(req.object.as_ref()).unwrap_or(&null);
            return match validate_update(kind, old, new) {
                Ok(()) => Validation::Answer(Box::new(AdmissionResponse::from(req))),
                Err(refusal) => deny(refusal.to_string()),
            };
        }
        // Not configured; deleting a stale approval must always be possible.
        Operation::Delete | Operation::Connect => {
            return Validation::Answer(Box::new(AdmissionResponse::from(req)));
        }
    }
    let Some(object) = req.object.as_ref() else {
        return deny(format!(
            "object: the review of a {} carries no object",
            kind.kind()
        ));
    };
    let requester = match identity_of(&req.user_info) {
        Ok(identity) => identity,
        Err(e) => return deny(e.to_string()),
    };
    let null = Value::Null;
    if let Err(refusal) = validate_stamp(kind, spec_of(Some(object)).unwrap_or(&null), &requester) {
        return deny(refusal.to_string());
    }
    let subject = match kind {
        Reviewed::SchemaApproval => {
            typed(object, kind).map(|a| Subject::SchemaApproval(Box::new(a)))
        }
        Reviewed::MigrationApproval => {
            typed(object, kind).map(|a| Subject::MigrationApproval(Box::new(a)))
        }
        Reviewed::RunAcknowledgment => {
            typed(object, kind).map(|a| Subject::RunAcknowledgment(Box::new(a)))
        }
    };
    match (subject, req.namespace.as_deref()) {
        (Ok(subject), Some(namespace)) => Validation::Read {
            namespace: namespace.to_owned(),
            subject,
        },
        (Ok(_), None) => deny(format!(
            "metadata.namespace: a {} is namespaced; the review names no namespace",
            kind.kind()
        )),
        (Err(e), _) => deny(e),
    }
}

/// What was read for a [`Subject`]: the resource and the plan, `None` where
/// no object has that name.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The PtahSchema named.
    pub schema: Option<PtahSchema>,
    /// The PtahSchemaPlan named.
    pub schema_plan: Option<PtahSchemaPlan>,
    /// The PtahMigration named.
    pub migration: Option<PtahMigration>,
    /// The PtahMigrationPlan named.
    pub migration_plan: Option<PtahMigrationPlan>,
}

/// The validating answer once the reads are done.
pub fn decide(
    req: &AdmissionRequest<DynamicObject>,
    subject: &Subject,
    observed: &Observed,
) -> AdmissionResponse {
    let verdict = match subject {
        Subject::SchemaApproval(a) => {
            validate_schema_approval(a, observed.schema.as_ref(), observed.schema_plan.as_ref())
        }
        Subject::MigrationApproval(a) => validate_migration_approval(
            a,
            observed.migration.as_ref(),
            observed.migration_plan.as_ref(),
        ),
        Subject::RunAcknowledgment(a) => validate_acknowledgment(a, observed.migration.as_ref()),
    };
    match verdict {
        Ok(()) => AdmissionResponse::from(req),
        Err(refusal) => AdmissionResponse::from(req).deny(refusal),
    }
}

#[cfg(test)]
#[path = "review_tests.rs"]
mod tests;
