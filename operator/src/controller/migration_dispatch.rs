//! The Job of a migration's claim: what the builder is given, from the
//! migration's spec, its status, the claim and (for Apply) the stored plan.
//! Pure, as `dispatch.rs` is for a schema, on the input both families share
//! (`job_input.rs`).
//!
//! An Apply's Job carries the digest of the approved sequence
//! ([`crate::protocol::migrations::sequence_digest`]), which `status.plan` does
//! not hold: the controller reads the PtahMigrationPlan the claim names
//! ([`crate::execution::migration_plan::read`]) and passes it here.

use crate::api::annotations::MIGRATION_LABEL;
use crate::api::migration::PtahMigration;
use crate::api::plan::PtahMigrationPlan;
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{ApplyInput, JobInput, OwnerKind};
use crate::protocol::migrations::sequence_digest;

use super::Config;
use super::family::Family;
use super::job_input::{NotBuildable, common_input, current_plan, missing};

/// The builder's input for `claim` of `migration`. `plan` is the stored
/// PtahMigrationPlan the claim names, read by the controller; an Apply needs
/// it (for the sequence digest), a read ignores it.
pub fn job_input(
    migration: &PtahMigration,
    claim: &ActiveOperation,
    config: &Config,
    plan: Option<&PtahMigrationPlan>,
) -> Result<JobInput, NotBuildable> {
    let spec = migration.job_spec();
    let mut input = common_input(
        OwnerKind::PtahMigration,
        &migration.metadata,
        claim,
        config,
        spec,
    )?;
    input.apply = apply_input(migration, claim, plan)?;
    Ok(input)
}

/// What an Apply runs: the plan its claim names, current in `status.plan`,
/// and the stored plan of that name, UID and fingerprint; the sequence digest
/// from the stored sequence, the transaction mode the plan bound.
fn apply_input(
    migration: &PtahMigration,
    claim: &ActiveOperation,
    plan: Option<&PtahMigrationPlan>,
) -> Result<Option<ApplyInput>, NotBuildable> {
    if claim.type_ != OperationType::Apply {
        return Ok(None);
    }
    let plans = migration.status.as_ref().and_then(|s| s.plan.as_ref());
    let current = current_plan(plans, |p| &p.name, claim)?;
    if claim
        .plan_fingerprint
        .as_ref()
        .is_some_and(|f| *f != current.fingerprint)
    {
        return Err(missing(
            "status.activeOperation.planFingerprint",
            format!("is not the current plan's {}", current.fingerprint),
        ));
    }
    let stored = plan.ok_or_else(|| {
        missing(
            "status.plan",
            format!(
                "the Job needs the stored PtahMigrationPlan {}",
                current.name
            ),
        )
    })?;
    let same = stored.metadata.name.as_deref() == Some(current.name.as_str())
        && stored.metadata.uid.as_deref() == Some(current.uid.as_str())
        && stored.spec.fingerprint == current.fingerprint;
    if !same {
        return Err(missing(
            "status.plan",
            format!(
                "the stored PtahMigrationPlan is not {} of UID {} and fingerprint {}",
                current.name, current.uid, current.fingerprint
            ),
        ));
    }
    let digest = sequence_digest(&stored.spec.migrations)
        .map_err(|e| missing("status.plan", format!("its sequence: {e}")))?;
    Ok(Some(ApplyInput::Migration {
        plan_name: current.name.clone(),
        plan_fingerprint: current.fingerprint.clone(),
        sequence_digest: digest,
        transaction_mode: stored.spec.transaction_mode,
    }))
}

/// The label selector of a migration's Jobs.
pub fn jobs_of(migration_name: &str) -> String {
    format!("{MIGRATION_LABEL}={migration_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::{DatabaseEngine, GoDuration, MigrationTransactionMode};
    use crate::api::plan::PlannedMigration;
    use crate::api::source::SourceKind;
    use crate::api::status::SourceBinding;
    use crate::execution::job::SourceInput;
    use crate::execution::job::build_job;
    use serde_json::json;

    fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn config() -> Config {
        super::super::job_input::test_config(format!("r@{}", digest(1)), format!("e@{}", digest(2)))
    }

    fn migration(source: serde_json::Value) -> PtahMigration {
        serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahMigration",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "m-uid", "generation": 4},
            "spec": {
                "target": {"engine": "MariaDB", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "k"},
                "source": source,
                "policy": {"apply": "OnApproval", "lockTimeout": "2m", "transactionMode": "none"},
            },
            "status": {
                "plan": {"name": "orders-0123456789ab", "uid": "p-uid", "fingerprint": digest(7), "steps": 2},
            },
        }))
        .expect("a valid migration")
    }

    fn configmap() -> PtahMigration {
        migration(json!({"configMap": {"name": "migrations"}}))
    }

    fn claim(op: OperationType, source: Option<SourceBinding>) -> ActiveOperation {
        let mut c: ActiveOperation = serde_json::from_value(json!({
            "type": op,
            "operationID": digest(10),
            "inputFingerprint": digest(11),
            "jobName": "ptah-history-orders-aaaaaaaaaaaaaaaa",
            "attempt": 1,
            "startedAt": "2026-11-30T00:00:00Z",
        }))
        .expect("a valid claim");
        c.source = source;
        c
    }

    fn apply_claim() -> ActiveOperation {
        let mut c = claim(OperationType::Apply, Some(binding(Some("ptah-src-1"))));
        c.job_name = Some("ptah-apply-orders-aaaaaaaaaaaaaaaa".into());
        c.plan_name = Some("orders-0123456789ab".into());
        c.plan_uid = Some("p-uid".into());
        c.plan_fingerprint = Some(digest(7));
        c
    }

    fn binding(snapshot: Option<&str>) -> SourceBinding {
        crate::testing::configmap_binding(digest(12), snapshot)
    }

    fn planned(version: i64) -> PlannedMigration {
        PlannedMigration {
            version,
            version_key: None,
            description: None,
            checksum: format!("h1:{version}"),
            checkpoint: false,
            transaction_mode: None,
        }
    }

    /// The stored plan `status.plan` names, as the API server returns it.
    fn stored_plan() -> PtahMigrationPlan {
        serde_json::from_value(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahMigrationPlan",
            "metadata": {"name": "orders-0123456789ab", "namespace": "shop", "uid": "p-uid"},
            "spec": {
                "contractVersion": 2,
                "migrationRef": {"name": "orders", "uid": "m-uid"},
                "fingerprint": digest(7),
                "migrations": [planned(6), planned(7)],
                "historyFingerprint": digest(3),
                "currentVersion": 5,
                "source": binding(Some("ptah-src-1")),
                "coordinationDigest": digest(4),
                "targetIdentityDigest": digest(5),
                "policyFingerprint": digest(6),
                "transactionMode": "none",
                "executionBinding": config().execution,
            },
        }))
        .expect("a valid plan")
    }

    #[test]
    fn history_reads_the_bound_snapshot_with_the_migration_lock_timeout() {
        let c = claim(OperationType::History, Some(binding(Some("ptah-src-1"))));
        let input = job_input(&configmap(), &c, &config(), None).expect("buildable");
        assert_eq!(input.operation, OperationType::History);
        assert_eq!(input.owner.kind, OwnerKind::PtahMigration);
        assert_eq!(
            (input.owner.uid.as_str(), input.owner.generation),
            ("m-uid", 4)
        );
        assert_eq!(
            input.source,
            SourceInput::ConfigMap {
                snapshot_name: "ptah-src-1".into(),
                content_digest: digest(12),
            }
        );
        assert_eq!(input.target.engine, DatabaseEngine::MySQL);
        assert_eq!(input.target.lock_timeout, GoDuration::new("2m"));
        assert_eq!(input.target.dev_url_from, None);
        assert!(input.apply.is_none());
        build_job(&input).expect("the builder takes it");
    }

    #[test]
    fn resolve_reads_the_spec_and_verify_needs_the_pinned_digest_and_policy() {
        let git = migration(
            json!({"git": {"url": "https://git.example/m.git", "ref": {"branch": "main"}}}),
        );
        let input = job_input(&git, &claim(OperationType::Resolve, None), &config(), None)
            .expect("buildable");
        let SourceInput::Git(g) = input.source else {
            panic!("a Git source");
        };
        assert_eq!((g.commit, g.content_digest), (None, None));

        let oci = migration(json!({"oci": {"ociRef": "oci://r.example/m:v1"}}));
        let err = job_input(&oci, &claim(OperationType::Verify, None), &config(), None)
            .expect_err("no pinned digest");
        assert_eq!(err.field, "status.activeOperation.source.resolvedReference");
        let mut pinned = binding(None);
        pinned.kind = SourceKind::OCI;
        pinned.resolved_reference = Some(format!("oci://r.example/m@{}", digest(13)));
        let err = job_input(
            &oci,
            &claim(OperationType::Verify, Some(pinned)),
            &config(),
            None,
        )
        .expect_err("no verification policy");
        assert_eq!(err.field, "spec.source.verificationPolicyFrom");
    }

    #[test]
    fn a_missing_binding_or_reservation_or_engine_names_the_field() {
        let err = job_input(
            &configmap(),
            &claim(OperationType::History, Some(binding(None))),
            &config(),
            None,
        )
        .expect_err("no snapshot");
        assert_eq!(err.field, "status.activeOperation.source.snapshotName");
        let mut c = claim(OperationType::History, Some(binding(Some("s"))));
        c.job_name = None;
        let err = job_input(&configmap(), &c, &config(), None).expect_err("no job name");
        assert_eq!(err.field, "status.activeOperation.jobName");
        let mut m = configmap();
        m.spec.target.engine = "Oracle".into();
        let c = claim(OperationType::History, Some(binding(Some("s"))));
        let err = job_input(&m, &c, &config(), None).expect_err("unsupported");
        assert_eq!(err.field, "spec.target.engine");
    }

    #[test]
    fn an_apply_carries_the_stored_sequence_digest_and_the_bound_transaction_mode() {
        let plan = stored_plan();
        let input =
            job_input(&configmap(), &apply_claim(), &config(), Some(&plan)).expect("buildable");
        assert_eq!(
            input.apply,
            Some(ApplyInput::Migration {
                plan_name: "orders-0123456789ab".into(),
                plan_fingerprint: digest(7),
                sequence_digest: sequence_digest(&[planned(6), planned(7)]).expect("digest"),
                transaction_mode: Some(MigrationTransactionMode::None),
            })
        );
        let job = build_job(&input).expect("the builder takes it");
        let args = job
            .spec
            .and_then(|s| s.template.spec)
            .map(|p| p.containers[0].args.clone().unwrap_or_default())
            .unwrap_or_default();
        assert!(
            args.iter()
                .any(|a| a.starts_with("--sequence-digest=sha256:")),
            "{args:?}"
        );
    }

    #[test]
    fn an_apply_needs_the_current_plan_and_that_stored_plan() {
        // No stored plan passed.
        let err =
            job_input(&configmap(), &apply_claim(), &config(), None).expect_err("no stored plan");
        assert_eq!(err.field, "status.plan");
        assert!(err.reason.contains("orders-0123456789ab"), "{}", err.reason);
        // The claim names a plan status no longer holds.
        let mut c = apply_claim();
        c.plan_name = Some("orders-ffffffffffff".into());
        let err =
            job_input(&configmap(), &c, &config(), Some(&stored_plan())).expect_err("not current");
        assert_eq!(err.field, "status.plan");
        // The claim's fingerprint is not the current plan's.
        let mut c = apply_claim();
        c.plan_fingerprint = Some(digest(8));
        let err = job_input(&configmap(), &c, &config(), Some(&stored_plan()))
            .expect_err("another fingerprint");
        assert_eq!(err.field, "status.activeOperation.planFingerprint");
        // A stored plan of another UID (deleted and published again).
        let mut other = stored_plan();
        other.metadata.uid = Some("other-uid".into());
        let err = job_input(&configmap(), &apply_claim(), &config(), Some(&other))
            .expect_err("another UID");
        assert!(err.reason.contains("p-uid"), "{}", err.reason);
    }

    #[test]
    fn jobs_are_selected_by_the_migration_label() {
        assert_eq!(jobs_of("orders"), "operator.ptah.run/migration=orders");
    }
}
