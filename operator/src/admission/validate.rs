//! The validating half: an approval is admitted only while it names the
//! current plan of the resource it names, exactly (plan name, UID and
//! fingerprint; resource UID), and an acknowledgment only while it names the
//! migration's unresolved run. `kubectl ptah approve` therefore approves
//! nothing if the plan it showed was replaced: the refusal says which plan is
//! current, so the person reads that one and approves it.

use std::fmt;

use kube::ResourceExt;

use crate::api::approval::ApprovedSource;
use crate::api::common::{Identity, ObjectRef};
use crate::api::source::VerificationEvidence;
use crate::api::status::SourceBinding;
use crate::api::{
    PtahMigration, PtahMigrationApproval, PtahMigrationPlan, PtahMigrationRunAcknowledgment,
    PtahSchema, PtahSchemaApproval, PtahSchemaPlan,
};

use super::stamp::Reviewed;

/// Why admission refuses an approval or an acknowledgment. Each message
/// starts with the field it is about and says what is current; none carries
/// anything but names, UIDs and fingerprints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The resource the object names does not exist.
    #[error("{field}: {kind} {name} does not exist in this namespace")]
    Missing {
        /// The field naming it.
        field: &'static str,
        /// Its kind.
        kind: &'static str,
        /// The name given.
        name: String,
    },
    /// The resource exists under another UID: the one named was deleted.
    #[error(
        "{field}: {kind} {name} has UID {current}, not {named}: the one named was deleted and another created under its name; read the current one and name its UID"
    )]
    OtherUid {
        /// The field holding the UID.
        field: &'static str,
        /// Its kind.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The UID given.
        named: String,
        /// The UID it has.
        current: String,
    },
    /// The resource has no current plan to approve.
    #[error(
        "spec.planRef: {kind} {resource} has no current plan (status.plan is unset), so plan {named} is not current; approve a plan once the operator publishes one"
    )]
    NoCurrentPlan {
        /// Kind of the resource.
        kind: &'static str,
        /// Its name.
        resource: String,
        /// The plan the approval names.
        named: Named,
    },
    /// The plan named is not the resource's current plan.
    #[error(
        "spec.planRef: plan {named} is not the current plan of {kind} {resource} (current: {current}); read the current plan and approve that"
    )]
    NotCurrentPlan {
        /// Kind of the resource.
        kind: &'static str,
        /// Its name.
        resource: String,
        /// The plan the approval names.
        named: Named,
        /// The current plan.
        current: Named,
    },
    /// The fingerprint given is not the current plan's.
    #[error(
        "spec.planFingerprint: {named} is not the fingerprint of plan {plan} (current: {current}); read the current plan and approve that"
    )]
    OtherFingerprint {
        /// The plan.
        plan: String,
        /// The fingerprint given.
        named: String,
        /// The plan's fingerprint.
        current: String,
    },
    /// The current plan's object is gone (or was never readable).
    #[error(
        "spec.planRef: {plan_kind} {plan} does not exist, though {kind} {resource} names it as its current plan; wait for the operator to publish the plan again, then approve that"
    )]
    PlanMissing {
        /// Kind of the plan.
        plan_kind: &'static str,
        /// Its name.
        plan: String,
        /// Kind of the resource.
        kind: &'static str,
        /// Its name.
        resource: String,
    },
    /// The plan object belongs to another resource.
    #[error("spec.planRef: plan {plan} belongs to {kind} {owner}, not to {kind} {resource}")]
    PlanOfAnother {
        /// The plan.
        plan: String,
        /// Kind of the resource.
        kind: &'static str,
        /// The resource the plan is for.
        owner: Named,
        /// The resource the approval names.
        resource: Named,
    },
    /// The migration has no unresolved run.
    #[error(
        "spec.operationID: PtahMigration {migration} has no unresolved run (status.unresolvedRun is unset), so run {named} cannot be acknowledged{settled}"
    )]
    NoUnresolvedRun {
        /// The migration.
        migration: String,
        /// The operation ID given.
        named: String,
        /// How the run was settled, when it is the last settled one.
        settled: Settled,
    },
    /// The run named is not the unresolved run.
    #[error(
        "spec.operationID: run {named} is not the unresolved run of PtahMigration {migration} (unresolved: {current}); establish what that run did, then acknowledge it"
    )]
    NotTheUnresolvedRun {
        /// The migration.
        migration: String,
        /// The operation ID given.
        named: String,
        /// The unresolved run: operation, plan and Job.
        current: String,
    },
    /// A stamp is missing: the mutating webhook did not run.
    #[error(
        "{field}: not stamped; admission stamps it on creation (is the ptah-operator-approvals mutating webhook installed?)"
    )]
    Unstamped {
        /// The field.
        field: String,
    },
    /// The stamped identity is not the requester's.
    #[error(
        "{field}: names {named}, but the request was made by {requester}; admission stamps who decided, a client cannot"
    )]
    NotTheRequester {
        /// The field.
        field: String,
        /// The user name in the object.
        named: String,
        /// The user name of the request.
        requester: String,
    },
    /// The source the approval names is not the one the plan was made from.
    #[error(
        "{field}: the approval names {named}, but plan {plan} was made from {current}; approve the plan as `kubectl ptah plan` shows it"
    )]
    OtherSource {
        /// The field under `spec.source`.
        field: &'static str,
        /// The plan.
        plan: String,
        /// The value the approval names.
        named: String,
        /// The plan's.
        current: String,
    },
    /// An update changed the spec.
    #[error("spec: the spec of a {kind} is immutable, the stamps included; create a new one")]
    SpecChanged {
        /// The kind.
        kind: &'static str,
    },
}

/// An object by name and UID, as refusals print it: `name (UID uid)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named(String);

impl Named {
    fn of(name: &str, uid: &str) -> Self {
        Named(format!("{name} (UID {uid})"))
    }
}

impl From<&ObjectRef> for Named {
    fn from(r: &ObjectRef) -> Self {
        Named::of(&r.name, &r.uid)
    }
}

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The tail of [`Refusal::NoUnresolvedRun`]: whether that run was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled(pub Option<String>);

impl fmt::Display for Settled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(how) => write!(f, "; it was already settled ({how})"),
            None => Ok(()),
        }
    }
}

/// What the approval names, whatever its kind.
struct ApprovalNames<'a> {
    resource_field: &'static str,
    resource_kind: &'static str,
    resource: &'a ObjectRef,
    plan: &'a ObjectRef,
    fingerprint: &'a str,
    source: Option<&'a ApprovedSource>,
}

/// The resource as admission read it: its UID, current plan and the
/// evidence of its current verification.
struct Current<'a> {
    uid: &'a str,
    plan: Option<(&'a str, &'a str, &'a str)>,
    verified: Option<&'a VerificationEvidence>,
}

/// The plan object as admission read it.
struct PlanObject<'a> {
    kind: &'static str,
    uid: &'a str,
    fingerprint: &'a str,
    owner: &'a ObjectRef,
    source: &'a SourceBinding,
}

fn check_resource(
    field: &'static str,
    kind: &'static str,
    named: &ObjectRef,
    uid: Option<&str>,
) -> Result<(), Refusal> {
    let Some(uid) = uid else {
        return Err(Refusal::Missing {
            field,
            kind,
            name: named.name.clone(),
        });
    };
    if uid != named.uid {
        return Err(Refusal::OtherUid {
            field: uid_field(field),
            kind,
            name: named.name.clone(),
            named: named.uid.clone(),
            current: uid.to_owned(),
        });
    }
    Ok(())
}

fn uid_field(field: &'static str) -> &'static str {
    match field {
        "spec.schemaRef" => "spec.schemaRef.uid",
        "spec.migrationRef" => "spec.migrationRef.uid",
        "spec.planRef" => "spec.planRef.uid",
        other => other,
    }
}

/// The rule both approval kinds follow.
fn check_approval(
    names: ApprovalNames<'_>,
    current: Option<Current<'_>>,
    plan: Option<PlanObject<'_>>,
) -> Result<(), Refusal> {
    let resource_name = || names.resource.name.clone();
    check_resource(
        names.resource_field,
        names.resource_kind,
        names.resource,
        current.as_ref().map(|c| c.uid),
    )?;
    let verified = current.as_ref().and_then(|c| c.verified);
    let Some((plan_name, plan_uid, plan_fingerprint)) = current.and_then(|c| c.plan) else {
        return Err(Refusal::NoCurrentPlan {
            kind: names.resource_kind,
            resource: resource_name(),
            named: names.plan.into(),
        });
    };
    if plan_name != names.plan.name || plan_uid != names.plan.uid {
        return Err(Refusal::NotCurrentPlan {
            kind: names.resource_kind,
            resource: resource_name(),
            named: names.plan.into(),
            current: Named::of(plan_name, plan_uid),
        });
    }
    if plan_fingerprint != names.fingerprint {
        return Err(Refusal::OtherFingerprint {
            plan: names.plan.name.clone(),
            named: names.fingerprint.to_owned(),
            current: plan_fingerprint.to_owned(),
        });
    }
    // The status names the plan; the object must agree with it, so an
    // approval never stands on a summary alone.
    let Some(object) = plan else {
        return Err(Refusal::PlanMissing {
            plan_kind: plan_kind(names.resource_kind),
            plan: names.plan.name.clone(),
            kind: names.resource_kind,
            resource: resource_name(),
        });
    };
    check_resource("spec.planRef", object.kind, names.plan, Some(object.uid))?;
    if object.fingerprint != names.fingerprint {
        return Err(Refusal::OtherFingerprint {
            plan: names.plan.name.clone(),
            named: names.fingerprint.to_owned(),
            current: object.fingerprint.to_owned(),
        });
    }
    if object.owner != names.resource {
        return Err(Refusal::PlanOfAnother {
            plan: names.plan.name.clone(),
            kind: names.resource_kind,
            owner: object.owner.into(),
            resource: names.resource.into(),
        });
    }
    // The fingerprint binds the plan's source; a source the approval names
    // must be that one, and a signer it names that of the bound evidence.
    if let Some(named) = names.source {
        let bound = ApprovedSource::of(object.source, verified);
        if let Some((field, named, current)) = named.differs_from(&bound) {
            return Err(Refusal::OtherSource {
                field,
                plan: names.plan.name.clone(),
                named,
                current,
            });
        }
    }
    Ok(())
}

fn plan_kind(resource_kind: &str) -> &'static str {
    if resource_kind == "PtahSchema" {
        "PtahSchemaPlan"
    } else {
        "PtahMigrationPlan"
    }
}

/// Admits a PtahSchemaApproval only if it names the PtahSchema by its UID,
/// and that schema's current plan (`status.plan`) by name, UID and
/// fingerprint, and the plan object agrees: same UID and fingerprint, made
/// for that schema. `schema` and `plan` are the objects of those names in the
/// approval's namespace, if they exist.
pub fn validate_schema_approval(
    approval: &PtahSchemaApproval,
    schema: Option<&PtahSchema>,
    plan: Option<&PtahSchemaPlan>,
) -> Result<(), Refusal> {
    let spec = &approval.spec;
    check_approval(
        ApprovalNames {
            resource_field: "spec.schemaRef",
            resource_kind: "PtahSchema",
            resource: &spec.schema_ref,
            plan: &spec.plan_ref,
            fingerprint: &spec.plan_fingerprint,
            source: spec.source.as_ref(),
        },
        schema.map(|s| Current {
            uid: uid_of(s),
            verified: s
                .status
                .as_ref()
                .and_then(|st| st.source.as_ref())
                .and_then(|src| src.verification.as_ref()),
            plan: s
                .status
                .as_ref()
                .and_then(|st| st.plan.as_ref())
                .map(|p| (p.name.as_str(), p.uid.as_str(), p.fingerprint.as_str())),
        }),
        plan.map(|p| PlanObject {
            kind: "PtahSchemaPlan",
            uid: uid_of(p),
            fingerprint: &p.spec.fingerprint,
            owner: &p.spec.schema_ref,
            source: &p.spec.source,
        }),
    )
}

/// Admits a PtahMigrationApproval only if it names the PtahMigration by its
/// UID, and that migration's current plan (`status.plan`) by name, UID and
/// fingerprint, and the plan object agrees: same UID and fingerprint (which
/// binds the history the sequence continues), made for that migration.
pub fn validate_migration_approval(
    approval: &PtahMigrationApproval,
    migration: Option<&PtahMigration>,
    plan: Option<&PtahMigrationPlan>,
) -> Result<(), Refusal> {
    let spec = &approval.spec;
    check_approval(
        ApprovalNames {
            resource_field: "spec.migrationRef",
            resource_kind: "PtahMigration",
            resource: &spec.migration_ref,
            plan: &spec.plan_ref,
            fingerprint: &spec.plan_fingerprint,
            source: spec.source.as_ref(),
        },
        migration.map(|m| Current {
            uid: uid_of(m),
            verified: m
                .status
                .as_ref()
                .and_then(|st| st.source.as_ref())
                .and_then(|src| src.verification.as_ref()),
            plan: m
                .status
                .as_ref()
                .and_then(|st| st.plan.as_ref())
                .map(|p| (p.name.as_str(), p.uid.as_str(), p.fingerprint.as_str())),
        }),
        plan.map(|p| PlanObject {
            kind: "PtahMigrationPlan",
            uid: uid_of(p),
            fingerprint: &p.spec.fingerprint,
            owner: &p.spec.migration_ref,
            source: &p.spec.source,
        }),
    )
}

/// Admits a PtahMigrationRunAcknowledgment only if it names the PtahMigration
/// by its UID and that migration's unresolved run (`status.unresolvedRun`)
/// by its operation ID: the Apply claim that binds the run's plan and Job.
pub fn validate_acknowledgment(
    ack: &PtahMigrationRunAcknowledgment,
    migration: Option<&PtahMigration>,
) -> Result<(), Refusal> {
    let spec = &ack.spec;
    check_resource(
        "spec.migrationRef",
        "PtahMigration",
        &spec.migration_ref,
        migration.map(uid_of),
    )?;
    let status = migration.and_then(|m| m.status.as_ref());
    let Some(run) = status.and_then(|s| s.unresolved_run.as_ref()) else {
        let settled = status
            .and_then(|s| s.resolved_run.as_ref())
            .filter(|r| r.operation_id == spec.operation_id)
            .map(|r| match &r.acknowledgment_name {
                Some(name) => format!("by acknowledgment {name}"),
                None => format!("{:?}", r.resolution),
            });
        return Err(Refusal::NoUnresolvedRun {
            migration: spec.migration_ref.name.clone(),
            named: spec.operation_id.clone(),
            settled: Settled(settled),
        });
    };
    if run.operation_id != spec.operation_id {
        let mut current = format!("operation {}", run.operation_id);
        if let Some(plan) = &run.plan_name {
            current.push_str(&format!(", plan {plan}"));
        }
        if let Some(job) = &run.job_name {
            current.push_str(&format!(", Job {job}"));
        }
        return Err(Refusal::NotTheUnresolvedRun {
            migration: spec.migration_ref.name.clone(),
            named: spec.operation_id.clone(),
            current,
        });
    }
    Ok(())
}

/// Admits the stamps of a created object (its `spec`, as JSON) only if they
/// are the requester's: the mutating webhook ran and nothing after it
/// replaced the identity.
pub fn validate_stamp(
    kind: Reviewed,
    spec: &serde_json::Value,
    requester: &Identity,
) -> Result<(), Refusal> {
    let field = |name: &str| format!("spec.{name}");
    let stamped = |name: &str| spec.get(name).is_some_and(|v| !v.is_null());
    let who = spec
        .get(kind.who_field())
        .filter(|v| !v.is_null())
        .ok_or_else(|| Refusal::Unstamped {
            field: field(kind.who_field()),
        })?;
    // An identity that does not even read as one is not the requester's.
    let who: Option<Identity> = serde_json::from_value(who.clone()).ok();
    if who.as_ref() != Some(requester) {
        return Err(Refusal::NotTheRequester {
            field: field(kind.who_field()),
            named: who.map(|w| w.username).unwrap_or_default(),
            requester: requester.username.clone(),
        });
    }
    for name in [kind.when_field(), super::stamp::MUTATION_REQUEST_UID_FIELD] {
        if !stamped(name) {
            return Err(Refusal::Unstamped { field: field(name) });
        }
    }
    Ok(())
}

/// Admits an update only if it leaves the spec as it was (CEL says the same;
/// this keeps the stamps fixed even if the CRD's rule were lost). Metadata
/// changes, such as finalizers, pass: a stale approval must stay removable.
pub fn validate_update(
    kind: Reviewed,
    old_spec: &serde_json::Value,
    new_spec: &serde_json::Value,
) -> Result<(), Refusal> {
    if old_spec != new_spec {
        return Err(Refusal::SpecChanged { kind: kind.kind() });
    }
    Ok(())
}

fn uid_of<K: ResourceExt>(obj: &K) -> &str {
    obj.meta().uid.as_deref().unwrap_or_default()
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
