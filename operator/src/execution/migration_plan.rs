//! Stage 2's storage for a migration: the sequence a history reading left
//! pending, published as an immutable [`PtahMigrationPlan`] (ordered versions
//! and checksums, never SQL: the Apply reads the files again from the pinned
//! source), in the manner of the schema's [`super::plan`].
//!
//! * [`PlanRequest`]: what [`Effect::PublishPlan`] carries (the sequence, the
//!   reading's fingerprint, the database it reached).
//! * [`binding`] / [`plan_spec`] (pure): everything plan contract v2 binds,
//!   as [`supplychain::contract::MigrationPlanBinding`] takes it — the
//!   migration's UID, the sequence, the history fingerprint and current
//!   version, the source binding, the coordination and target identity
//!   digests, the `spec.policy` digest and transaction mode, the execution
//!   binding. What the request does not carry is read from the migration as
//!   stored after the status write that asked for the plan: its
//!   `status.history` must be the reading the request names, else the plan
//!   is refused (a reading that moved plans again; it is never mixed).
//! * [`publish`]: creates `<migration>-<12 hex of the fingerprint>`, owned by
//!   the migration, and marks it `Current`. The same fingerprint again finds
//!   the plan and writes nothing; an object of that name that is not exactly
//!   this plan is refused, never overwritten.
//! * [`read`]: the plan an Apply claim names, checked (owned by the
//!   migration, the claim's fingerprint), for its Job's sequence digest.
//! * [`collect`]: deletes the migration's plans that status no longer names
//!   ([`still_named`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use supplychain::contract::{self, ContractError, MigrationPlanBinding};

use super::plan::{contract_execution, contract_source, owned_by};
use crate::api::annotations::MIGRATION_LABEL;
use crate::api::common::{MigrationPolicy, MigrationTransactionMode, ObjectRef};
use crate::api::condition::{ConditionStatus, MigrationPlanConditionType, Reason};
use crate::api::conditions;
use crate::api::migration::{MigrationPlanSummary, PtahMigration, PtahMigrationStatus};
use crate::api::plan::{
    PLAN_CONTRACT_VERSION, PlannedMigration, PtahMigrationPlan, PtahMigrationPlanSpec,
};
use crate::api::status::binding_of;
use crate::execution::job::{LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY};
use crate::protocol::naming::coordination_digest;

/// `app.kubernetes.io/component` of a migration plan.
pub const PLAN_COMPONENT: &str = "migration-plan";
/// Most migrations a plan holds (the CRD's bound).
pub const SEQUENCE_MAX: usize = 256;
/// Hex digits of the fingerprint in a plan's name.
const NAME_HEX: usize = 12;

/// Why a migration plan is not published or not read. Each names the field,
/// the object or the rule.
#[derive(Debug, thiserror::Error)]
pub enum MigrationPlanError {
    /// The sequence breaks a rule of the format.
    #[error("migrations: {0}")]
    Sequence(String),
    /// A bound input has no canonical form (names the field).
    #[error("plan contract v2: {0}")]
    Contract(#[from] ContractError),
    /// The migration was not read from the API server.
    #[error("PtahMigration {name}: has no namespace or UID")]
    NotStored {
        /// Its name.
        name: String,
    },
    /// What the plan binds is not in the migration's status as the request
    /// says it is.
    #[error("{field}: {reason}")]
    Unbound {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A name the plan cannot take.
    #[error("plan name {name:?}: {rule}")]
    Name {
        /// The name.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// An object of the plan's name exists and is not this plan.
    #[error("PtahMigrationPlan {plan}: exists and {reason}; refused, never overwritten")]
    PlanConflict {
        /// The plan's name.
        plan: String,
        /// What differs.
        reason: String,
    },
    /// The plan is being deleted: publish again once it is gone.
    #[error("PtahMigrationPlan {plan}: being deleted")]
    Deleting {
        /// Its name.
        plan: String,
    },
    /// The plan does not exist.
    #[error("PtahMigrationPlan {plan}: not found")]
    PlanMissing {
        /// Its name.
        plan: String,
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

impl MigrationPlanError {
    /// Whether this is the API server failing or a plan on its way out
    /// (publish again later) rather than a refusal.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            MigrationPlanError::Api { .. } | MigrationPlanError::Deleting { .. }
        )
    }

    fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> MigrationPlanError {
        let what = what.into();
        move |source| MigrationPlanError::Api {
            what,
            source: Box::new(source),
        }
    }
}

fn unbound(field: &'static str, reason: impl Into<String>) -> MigrationPlanError {
    MigrationPlanError::Unbound {
        field,
        reason: reason.into(),
    }
}

/// What [`Effect::PublishPlan`] asks to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRequest {
    /// Ptah's pending sequence, in the order it runs.
    pub migrations: Vec<PlannedMigration>,
    /// The reading's fingerprint the plan binds.
    pub history_fingerprint: Option<String>,
    /// The database the reading reached.
    pub target_identity_digest: Option<String>,
}

/// A plan published: what `status.plan` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// For `status.plan` (the lifecycle sets `approvalRequired` by policy).
    pub summary: MigrationPlanSummary,
    /// Whether this call wrote anything (false: it was already published).
    pub wrote: bool,
}

/// A serde enum as the API spells it (`file`, `none`).
fn spelled<T: serde::Serialize>(value: &T, field: &'static str) -> Result<String, ContractError> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        _ => Err(ContractError::Invalid {
            field,
            reason: "does not serialize to a name",
        }),
    }
}

fn transaction_mode(
    mode: Option<MigrationTransactionMode>,
    field: &'static str,
) -> Result<Option<String>, ContractError> {
    mode.map(|m| spelled(&m, field)).transpose()
}

/// The `spec.policy` digest a plan binds.
pub fn policy_fingerprint(policy: &MigrationPolicy) -> Result<String, MigrationPlanError> {
    let value = serde_json::to_value(policy)
        .map_err(|e| ContractError::Serialize(format!("spec.policy: {e}")))?;
    Ok(contract::policy_fingerprint(&value)?)
}

/// The sequence's own rules: 1 to [`SEQUENCE_MAX`] migrations, each version
/// once (the CRD lists them as a map keyed by version).
fn check_sequence(migrations: &[PlannedMigration]) -> Result<(), MigrationPlanError> {
    if migrations.is_empty() {
        return Err(MigrationPlanError::Sequence(
            "is empty: nothing pending is the verdict, not a plan".into(),
        ));
    }
    if migrations.len() > SEQUENCE_MAX {
        return Err(MigrationPlanError::Sequence(format!(
            "holds {} migrations; a plan holds at most {SEQUENCE_MAX}",
            migrations.len()
        )));
    }
    let mut seen = BTreeSet::new();
    if let Some(m) = migrations.iter().find(|m| !seen.insert(m.version)) {
        return Err(MigrationPlanError::Sequence(format!(
            "version {} appears twice",
            m.version
        )));
    }
    Ok(())
}

/// Everything the plan of `request` for `migration` binds (pure), and the
/// spec it is stored as.
pub fn binding(
    migration: &PtahMigration,
    request: &PlanRequest,
) -> Result<(MigrationPlanBinding, PtahMigrationPlanSpec), MigrationPlanError> {
    check_sequence(&request.migrations)?;
    let (migration_ref, namespace) = migration_ref_of(migration)?;
    let history_fingerprint = request
        .history_fingerprint
        .clone()
        .ok_or_else(|| unbound("historyFingerprint", "the reading has none"))?;
    let target_identity_digest = request
        .target_identity_digest
        .clone()
        .ok_or_else(|| unbound("targetIdentityDigest", "the reading named no database"))?;
    let status = migration.status.as_ref();
    let history = status
        .and_then(|s| s.history.as_ref())
        .ok_or_else(|| unbound("status.history", "no reading recorded"))?;
    if history.fingerprint.as_deref() != Some(history_fingerprint.as_str()) {
        return Err(unbound(
            "status.history.fingerprint",
            format!(
                "is {:?}, not the reading {history_fingerprint} the plan continues",
                history.fingerprint
            ),
        ));
    }
    if history
        .target_identity_digest
        .as_ref()
        .is_some_and(|t| *t != target_identity_digest)
    {
        return Err(unbound(
            "status.history.targetIdentityDigest",
            format!("is not the database {target_identity_digest} the reading reached"),
        ));
    }
    let current_version = history
        .current_version
        .ok_or_else(|| unbound("status.history.currentVersion", "not recorded"))?;
    let source = status
        .and_then(|s| s.source.as_ref())
        .map(binding_of)
        .ok_or_else(|| unbound("status.source", "no source resolved"))?;
    let execution_binding = status
        .and_then(|s| s.execution_binding.clone())
        .ok_or_else(|| unbound("status.executionBinding", "not recorded"))?;
    let spec = &migration.spec;
    let coordination = coordination_digest(&spec.target.engine, &namespace, &spec.target)
        .ok_or_else(|| {
            unbound(
                "spec.target",
                "names neither a coordinationKey nor a realmRef",
            )
        })?;
    let policy_fingerprint = policy_fingerprint(&spec.policy)?;
    let mut sequence = Vec::with_capacity(request.migrations.len());
    for m in &request.migrations {
        sequence.push(contract::PlannedMigration {
            version: m.version,
            version_key: m.version_key.clone(),
            checksum: m.checksum.clone(),
            checkpoint: m.checkpoint,
            transaction_mode: transaction_mode(m.transaction_mode, "migrations.transactionMode")?,
        });
    }
    let bound = MigrationPlanBinding {
        migration_uid: migration_ref.uid.clone(),
        migrations: sequence,
        history_fingerprint: history_fingerprint.clone(),
        current_version,
        source: contract_source(&source),
        coordination_digest: coordination.clone(),
        target_identity_digest: target_identity_digest.clone(),
        policy_fingerprint: policy_fingerprint.clone(),
        transaction_mode: transaction_mode(
            spec.policy.transaction_mode,
            "spec.policy.transactionMode",
        )?,
        execution: contract_execution(&execution_binding),
    };
    let stored = PtahMigrationPlanSpec {
        contract_version: PLAN_CONTRACT_VERSION,
        migration_ref,
        fingerprint: bound.fingerprint()?,
        migrations: request.migrations.clone(),
        history_fingerprint,
        current_version,
        source,
        coordination_digest: coordination,
        target_identity_digest,
        policy_fingerprint,
        transaction_mode: spec.policy.transaction_mode,
        execution_binding,
    };
    Ok((bound, stored))
}

/// The plan's name and spec (pure).
pub fn plan_spec(
    migration: &PtahMigration,
    request: &PlanRequest,
) -> Result<(String, PtahMigrationPlanSpec), MigrationPlanError> {
    let (_, spec) = binding(migration, request)?;
    let name = plan_name(&spec.migration_ref.name, &spec.fingerprint)?;
    Ok((name, spec))
}

/// `<migration>-<first 12 hex digits of the fingerprint>`.
pub fn plan_name(migration: &str, fingerprint: &str) -> Result<String, MigrationPlanError> {
    let hex = fingerprint
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .ok_or_else(|| MigrationPlanError::Name {
            name: fingerprint.to_string(),
            rule: "a fingerprint is sha256: and 64 lowercase hex digits",
        })?;
    let name = format!("{migration}-{}", &hex[..NAME_HEX]);
    if migration.is_empty() || name.len() > 253 {
        return Err(MigrationPlanError::Name {
            name,
            rule: "a plan name is a DNS subdomain of at most 253 characters",
        });
    }
    Ok(name)
}

/// What `status.plan` holds of a stored plan.
pub fn summary(name: &str, uid: &str, plan: &PtahMigrationPlan) -> MigrationPlanSummary {
    let spec = &plan.spec;
    MigrationPlanSummary {
        name: name.to_string(),
        uid: uid.to_string(),
        fingerprint: spec.fingerprint.clone(),
        from_version: Some(spec.current_version),
        to_version: spec.migrations.last().map(|m| m.version),
        steps: i32::try_from(spec.migrations.len()).ok(),
        approval_required: false,
        created_at: plan.metadata.creation_timestamp.clone(),
    }
}

fn migration_ref_of(m: &PtahMigration) -> Result<(ObjectRef, String), MigrationPlanError> {
    match (m.namespace(), m.meta().uid.clone()) {
        (Some(ns), Some(uid)) => Ok((
            ObjectRef {
                name: m.name_any(),
                uid,
            },
            ns,
        )),
        _ => Err(MigrationPlanError::NotStored { name: m.name_any() }),
    }
}

fn labels(migration: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_COMPONENT.to_string(), PLAN_COMPONENT.to_string()),
    ]);
    // Admission keeps names to 63 characters; a longer one is no label.
    if migration.len() <= 63 {
        labels.insert(MIGRATION_LABEL.to_string(), migration.to_string());
    }
    labels
}

/// The plan object: owned by the migration, not as its controller.
pub fn plan_object(name: &str, namespace: &str, spec: PtahMigrationPlanSpec) -> PtahMigrationPlan {
    let owner = spec.migration_ref.clone();
    let mut plan = PtahMigrationPlan::new(name, spec);
    plan.metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels(&owner.name)),
        owner_references: Some(vec![OwnerReference {
            api_version: PtahMigration::api_version(&()).into_owned(),
            kind: PtahMigration::kind(&()).into_owned(),
            name: owner.name,
            uid: owner.uid,
            controller: Some(false),
            block_owner_deletion: Some(false),
        }]),
        ..ObjectMeta::default()
    };
    plan
}

/// Why a stored plan spec is not `expected`, or `None` when it is.
fn spec_mismatch(
    stored: &PtahMigrationPlanSpec,
    expected: &PtahMigrationPlanSpec,
) -> Option<String> {
    if stored.fingerprint != expected.fingerprint {
        return Some(format!(
            "has fingerprint {}, not {}",
            stored.fingerprint, expected.fingerprint
        ));
    }
    if stored.migrations != expected.migrations {
        return Some("lists another sequence".to_string());
    }
    (stored != expected).then(|| "has another spec under the same fingerprint".to_string())
}

/// Publishes the plan [`Effect::PublishPlan`] asked for (see the module
/// doc); `migration` is as stored after the status write that asked.
pub async fn publish(
    client: &Client,
    migration: &PtahMigration,
    request: &PlanRequest,
) -> Result<Published, MigrationPlanError> {
    // Everything pure first: a refused plan writes nothing.
    let (name, spec) = plan_spec(migration, request)?;
    let (migration_ref, namespace) = migration_ref_of(migration)?;
    let plans: Api<PtahMigrationPlan> = Api::namespaced(client.clone(), &namespace);
    let mut wrote = false;
    let err = |what: &str| MigrationPlanError::api(format!("{what} PtahMigrationPlan {name}"));

    let stored = match plans.get_opt(&name).await.map_err(err("reading"))? {
        Some(existing) => existing,
        None => {
            let object = plan_object(&name, &namespace, spec.clone());
            match plans.create(&PostParams::default(), &object).await {
                Ok(created) => {
                    wrote = true;
                    created
                }
                // Another pass created it meanwhile: check what it wrote.
                Err(kube::Error::Api(e)) if e.code == 409 => plans
                    .get_opt(&name)
                    .await
                    .map_err(err("reading"))?
                    .ok_or_else(|| MigrationPlanError::Deleting { plan: name.clone() })?,
                Err(e) => return Err(err("creating")(e)),
            }
        }
    };
    if stored.metadata.deletion_timestamp.is_some() {
        return Err(MigrationPlanError::Deleting { plan: name });
    }
    if let Some(reason) = spec_mismatch(&stored.spec, &spec) {
        return Err(MigrationPlanError::PlanConflict { plan: name, reason });
    }
    if !owned_by(&stored.metadata, &migration_ref.uid) {
        return Err(MigrationPlanError::PlanConflict {
            plan: name,
            reason: format!("is not owned by PtahMigration {}", migration_ref.name),
        });
    }
    let uid = stored
        .metadata
        .uid
        .clone()
        .ok_or_else(|| MigrationPlanError::PlanConflict {
            plan: name.clone(),
            reason: "has no UID".to_string(),
        })?;

    // Published is current: a plan published again after it was retired is
    // the current one again (its old approvals stay stale).
    let mut status = stored.status.clone().unwrap_or_default();
    if !conditions::is_true(&status.conditions, MigrationPlanConditionType::Current) {
        status.observed_generation = stored.metadata.generation;
        conditions::set(
            &mut status.conditions,
            MigrationPlanConditionType::Current,
            ConditionStatus::True,
            Reason::Published,
            format!("{} migrations pending", spec.migrations.len()),
            stored.metadata.generation,
            &Time(Timestamp::now()),
        );
        plans
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(err("writing the status of"))?;
        wrote = true;
    }
    Ok(Published {
        summary: summary(&name, &uid, &stored),
        wrote,
    })
}

/// The plan an Apply claim names, checked: present and not being deleted,
/// owned by `migration`, of the claim's fingerprint.
pub async fn read(
    client: &Client,
    migration: &PtahMigration,
    plan_name: &str,
    expected_fingerprint: &str,
) -> Result<PtahMigrationPlan, MigrationPlanError> {
    let (migration_ref, namespace) = migration_ref_of(migration)?;
    let plans: Api<PtahMigrationPlan> = Api::namespaced(client.clone(), &namespace);
    let plan = plans
        .get_opt(plan_name)
        .await
        .map_err(MigrationPlanError::api(format!(
            "reading PtahMigrationPlan {plan_name}"
        )))?
        .ok_or_else(|| MigrationPlanError::PlanMissing {
            plan: plan_name.to_string(),
        })?;
    if plan.metadata.deletion_timestamp.is_some() {
        return Err(MigrationPlanError::Deleting {
            plan: plan_name.to_string(),
        });
    }
    if !owned_by(&plan.metadata, &migration_ref.uid) || plan.spec.migration_ref != migration_ref {
        return Err(MigrationPlanError::PlanConflict {
            plan: plan_name.to_string(),
            reason: format!("is not a plan of PtahMigration {}", migration_ref.name),
        });
    }
    if plan.spec.fingerprint != expected_fingerprint {
        return Err(MigrationPlanError::PlanConflict {
            plan: plan_name.to_string(),
            reason: format!(
                "has fingerprint {}, not the claim's {expected_fingerprint}",
                plan.spec.fingerprint
            ),
        });
    }
    Ok(plan)
}

/// The plans a migration's status still names, which [`collect`] keeps: the
/// current plan (`status.plan`), the plan the claim in flight runs, the plan
/// the last run carried out (`status.lastRun`) and the plan of an unsettled
/// run (`status.unresolvedRun`). An approval keeps none: an approval of a
/// plan status no longer names authorizes nothing, and the journal keeps the
/// retired plan's name, UID and fingerprint.
pub fn still_named(status: &PtahMigrationStatus) -> Vec<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    names.extend(status.plan.as_ref().map(|p| p.name.clone()));
    names.extend(
        status
            .active_operation
            .as_ref()
            .and_then(|c| c.plan_name.clone()),
    );
    names.extend(status.last_run.as_ref().and_then(|r| r.plan_name.clone()));
    names.extend(
        status
            .unresolved_run
            .as_ref()
            .and_then(|u| u.plan_name.clone()),
    );
    names.into_iter().filter(|n| !n.is_empty()).collect()
}

/// Deletes the plans `migration` owns whose names are not in `keep`
/// (normally [`still_named`]). Returns the names deleted.
pub async fn collect(
    client: &Client,
    migration: &PtahMigration,
    keep: &[String],
) -> Result<Vec<String>, MigrationPlanError> {
    let (migration_ref, namespace) = migration_ref_of(migration)?;
    let plans: Api<PtahMigrationPlan> = Api::namespaced(client.clone(), &namespace);
    let selector = format!("{MIGRATION_LABEL}={}", migration_ref.name);
    super::plan::collect_owned(&plans, &selector, &migration_ref.uid, keep)
        .await
        .map_err(|(what, e)| MigrationPlanError::api(what)(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::ApplyPolicy;
    use crate::api::status::ActiveOperation;

    fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn planned(version: i64) -> PlannedMigration {
        PlannedMigration {
            version,
            version_key: None,
            description: Some(format!("m{version}")),
            checksum: format!("h1:{version}"),
            checkpoint: false,
            transaction_mode: None,
        }
    }

    /// A stored migration whose status holds a reading, a ConfigMap source
    /// and an execution binding.
    fn migration() -> PtahMigration {
        serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahMigration",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "m-uid", "generation": 2},
            "spec": {
                "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "primary"},
                "source": {"configMap": {"name": "migrations"}},
                "policy": {"apply": "OnApproval"},
            },
            "status": {
                "source": {
                    "kind": "ConfigMap",
                    "revision": format!("migrations@{}", digest(1)),
                    "contentDigest": digest(1),
                    "configMap": {"name": "migrations", "uid": "cm-uid", "snapshotName": "ptah-src-1"},
                },
                "executionBinding": {
                    "epoch": format!("v1-{}", "ab".repeat(16)),
                    "controllerStateVersion": 1,
                    "ptahVersion": "0.23.0",
                    "executorImage": format!("e@{}", digest(9)),
                    "runnerProtocolVersion": 1,
                },
                "history": {"currentVersion": 5, "fingerprint": digest(3), "targetIdentityDigest": digest(4)},
            },
        }))
        .expect("a valid migration")
    }

    fn request() -> PlanRequest {
        PlanRequest {
            migrations: vec![planned(6), planned(7)],
            history_fingerprint: Some(digest(3)),
            target_identity_digest: Some(digest(4)),
        }
    }

    fn fp(m: &PtahMigration, r: &PlanRequest) -> String {
        plan_spec(m, r).expect("a plan").1.fingerprint
    }

    #[test]
    fn the_spec_holds_versions_and_checksums_bound_by_contract_v2() {
        let m = migration();
        let (name, spec) = plan_spec(&m, &request()).expect("a plan");
        assert_eq!(name, plan_name("orders", &spec.fingerprint).expect("name"));
        assert!(name.starts_with("orders-") && name.len() == "orders-".len() + 12);
        assert_eq!(spec.contract_version, 2);
        assert_eq!(spec.migration_ref.uid, "m-uid");
        assert_eq!(spec.migrations, vec![planned(6), planned(7)]);
        assert_eq!(spec.current_version, 5);
        assert_eq!(spec.history_fingerprint, digest(3));
        assert_eq!(spec.target_identity_digest, digest(4));
        assert_eq!(spec.source.snapshot_name.as_deref(), Some("ptah-src-1"));
        assert!(spec.coordination_digest.starts_with("sha256:"));
        // The fingerprint is MigrationPlanBinding's, and stable.
        let (bound, _) = binding(&m, &request()).expect("bound");
        assert_eq!(spec.fingerprint, bound.fingerprint().expect("fingerprint"));
        assert_eq!(spec.fingerprint, fp(&m, &request()));
        // Descriptions are shown, not bound.
        let mut described = request();
        described.migrations[0].description = Some("other".into());
        assert_eq!(fp(&m, &described), spec.fingerprint);
    }

    #[test]
    fn the_binding_maps_each_input_as_the_contract_takes_it() {
        let mut m = migration();
        m.spec.policy.transaction_mode = Some(MigrationTransactionMode::File);
        let mut r = request();
        r.migrations[1].transaction_mode = Some(MigrationTransactionMode::None);
        r.migrations[1].version_key = Some("0000000007".into());
        let (bound, spec) = binding(&m, &r).expect("bound");
        let st = m.status.as_ref().expect("status");
        let exec = st.execution_binding.as_ref().expect("binding");
        let expected = MigrationPlanBinding {
            migration_uid: "m-uid".into(),
            migrations: vec![
                contract::PlannedMigration {
                    version: 6,
                    version_key: None,
                    checksum: "h1:6".into(),
                    checkpoint: false,
                    transaction_mode: None,
                },
                contract::PlannedMigration {
                    version: 7,
                    version_key: Some("0000000007".into()),
                    checksum: "h1:7".into(),
                    checkpoint: false,
                    transaction_mode: Some("none".into()),
                },
            ],
            history_fingerprint: digest(3),
            current_version: 5,
            source: contract_source(&binding_of(st.source.as_ref().expect("source"))),
            coordination_digest: coordination_digest("PostgreSQL", "shop", &m.spec.target)
                .expect("coordination"),
            target_identity_digest: digest(4),
            policy_fingerprint: contract::policy_fingerprint(&json!({
                "apply": "OnApproval", "lockTimeout": "5m", "transactionMode": "file",
            }))
            .expect("policy"),
            transaction_mode: Some("file".into()),
            execution: contract_execution(exec),
        };
        assert_eq!(bound, expected);
        assert_eq!(spec.transaction_mode, Some(MigrationTransactionMode::File));
        assert_eq!(spec.policy_fingerprint, expected.policy_fingerprint);
    }

    #[test]
    fn every_bound_input_changes_the_fingerprint() {
        let base = fp(&migration(), &request());
        let mut seen = BTreeSet::from([base]);
        let mut check = |what: &str, m: PtahMigration, r: PlanRequest| {
            assert!(
                seen.insert(fp(&m, &r)),
                "{what} did not change the fingerprint"
            );
        };
        let mut r = request();
        r.migrations[1].checksum = "h1:other".into();
        check("a checksum", migration(), r);
        let mut r = request();
        r.migrations.reverse();
        check("the order", migration(), r);
        let mut r = request();
        r.migrations[0].checkpoint = true;
        check("a checkpoint", migration(), r);
        let mut m = migration();
        let mut r = request();
        let st = m.status.as_mut().expect("status");
        st.history.as_mut().expect("history").target_identity_digest = Some(digest(5));
        r.target_identity_digest = Some(digest(5));
        check("the target identity", m, r);
        let mut m = migration();
        m.metadata.uid = Some("other-uid".into());
        check("the migration UID", m, request());
        let mut m = migration();
        let st = m.status.as_mut().expect("status");
        st.history.as_mut().expect("history").current_version = Some(4);
        check("the current version", m, request());
        let mut m = migration();
        let mut r = request();
        let st = m.status.as_mut().expect("status");
        st.history.as_mut().expect("history").fingerprint = Some(digest(6));
        r.history_fingerprint = Some(digest(6));
        check("the history fingerprint", m, r);
        let mut m = migration();
        m.status
            .as_mut()
            .expect("status")
            .source
            .as_mut()
            .expect("source")
            .content_digest = digest(7);
        check("the source", m, request());
        let mut m = migration();
        m.spec.policy.apply = ApplyPolicy::Always;
        check("spec.policy", m, request());
        let mut m = migration();
        m.spec.policy.transaction_mode = Some(MigrationTransactionMode::None);
        check("the transaction mode", m, request());
        let mut m = migration();
        m.spec.target.coordination_key = Some("replica".into());
        check("the coordination identity", m, request());
        let mut m = migration();
        let st = m.status.as_mut().expect("status");
        st.execution_binding.as_mut().expect("binding").ptah_version = "0.24.0".into();
        check("the execution binding", m, request());
    }

    #[test]
    fn a_plan_needs_the_reading_the_request_names() {
        let mut r = request();
        r.history_fingerprint = Some(digest(8));
        let err = plan_spec(&migration(), &r).expect_err("another reading");
        assert!(
            err.to_string().starts_with("status.history.fingerprint"),
            "{err}"
        );
        let mut r = request();
        r.target_identity_digest = Some(digest(9));
        let err = plan_spec(&migration(), &r).expect_err("another database");
        assert!(
            err.to_string()
                .starts_with("status.history.targetIdentityDigest"),
            "{err}"
        );
        let mut r = request();
        r.target_identity_digest = None;
        let err = plan_spec(&migration(), &r).expect_err("no database");
        assert!(err.to_string().starts_with("targetIdentityDigest"), "{err}");
        let mut m = migration();
        m.status.as_mut().expect("status").source = None;
        let err = plan_spec(&m, &request()).expect_err("no source");
        assert!(err.to_string().starts_with("status.source"), "{err}");
        let mut m = migration();
        m.status.as_mut().expect("status").execution_binding = None;
        let err = plan_spec(&m, &request()).expect_err("no binding");
        assert!(
            err.to_string().starts_with("status.executionBinding"),
            "{err}"
        );
        let mut m = migration();
        m.metadata.uid = None;
        assert!(matches!(
            plan_spec(&m, &request()),
            Err(MigrationPlanError::NotStored { .. })
        ));
    }

    #[test]
    fn a_sequence_empty_repeated_or_too_long_is_refused() {
        let mut r = request();
        r.migrations.clear();
        assert!(matches!(
            plan_spec(&migration(), &r),
            Err(MigrationPlanError::Sequence(_))
        ));
        let mut r = request();
        r.migrations.push(planned(6));
        let err = plan_spec(&migration(), &r).expect_err("repeated");
        assert!(err.to_string().contains("version 6 appears twice"), "{err}");
        let mut r = request();
        r.migrations = (6..6 + SEQUENCE_MAX as i64 + 1).map(planned).collect();
        let err = plan_spec(&migration(), &r).expect_err("too long");
        assert!(err.to_string().contains("at most 256"), "{err}");
        let mut r = request();
        r.migrations[0].checksum.clear();
        let err = plan_spec(&migration(), &r).expect_err("no checksum");
        assert!(err.to_string().contains("migrations.checksum"), "{err}");
    }

    #[test]
    fn names_follow_the_migration_and_the_fingerprint() {
        let f = format!("sha256:0123456789ab{}", "f".repeat(52));
        assert_eq!(
            plan_name("orders", &f).expect("name"),
            "orders-0123456789ab"
        );
        assert!(plan_name("orders", "sha256:XYZ").is_err());
        assert!(plan_name("", &f).is_err());
        assert!(plan_name(&"a".repeat(240), &f).is_ok());
        assert!(plan_name(&"a".repeat(241), &f).is_err());
    }

    #[test]
    fn the_object_is_owned_by_the_migration_and_labelled() {
        let (name, spec) = plan_spec(&migration(), &request()).expect("a plan");
        let plan = plan_object(&name, "shop", spec);
        let owner = &plan.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("PtahMigration", "m-uid")
        );
        assert_eq!(owner.controller, Some(false));
        let labels = plan.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get(MIGRATION_LABEL).map(String::as_str),
            Some("orders")
        );
        let s = summary(&name, "p-uid", &plan);
        assert_eq!(
            (s.from_version, s.to_version, s.steps),
            (Some(5), Some(7), Some(2))
        );
        assert_eq!(s.uid, "p-uid");
        assert!(!s.approval_required);
    }

    #[test]
    fn a_stored_plan_of_another_spec_is_named_as_a_conflict() {
        let (_, spec) = plan_spec(&migration(), &request()).expect("a plan");
        assert_eq!(spec_mismatch(&spec, &spec), None);
        let mut other = spec.clone();
        other.fingerprint = digest(9);
        assert!(spec_mismatch(&other, &spec).is_some_and(|r| r.contains("fingerprint")));
        let mut other = spec.clone();
        other.migrations.pop();
        assert_eq!(
            spec_mismatch(&other, &spec).as_deref(),
            Some("lists another sequence")
        );
        let mut other = spec.clone();
        other.current_version = 1;
        assert!(spec_mismatch(&other, &spec).is_some());
    }

    #[test]
    fn status_names_the_plans_collection_keeps() {
        let mut st = PtahMigrationStatus::default();
        assert!(still_named(&st).is_empty());
        st.plan = Some(MigrationPlanSummary {
            name: "current".into(),
            uid: "u".into(),
            fingerprint: digest(1),
            from_version: None,
            to_version: None,
            steps: None,
            approval_required: true,
            created_at: None,
        });
        let claim: ActiveOperation = serde_json::from_value(json!({
            "type": "Apply",
            "operationID": digest(2),
            "inputFingerprint": digest(3),
            "attempt": 1,
            "startedAt": "2026-11-30T00:00:00Z",
            "planName": "running",
        }))
        .expect("a claim");
        st.active_operation = Some(claim);
        st.last_run = Some(
            serde_json::from_value(json!({
                "operationID": digest(4), "outcome": "Applied", "planName": "ran",
            }))
            .expect("a run"),
        );
        st.unresolved_run = Some(
            serde_json::from_value(json!({
                "operationID": digest(5), "outcome": "Unknown", "planName": "held",
                "recordedAt": "2026-11-30T00:00:00Z",
            }))
            .expect("a hold"),
        );
        assert_eq!(still_named(&st), vec!["current", "held", "ran", "running"]);
    }
}
