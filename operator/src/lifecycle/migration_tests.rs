//! One named test per arrow of the seed's three migration diagrams and per
//! migration branch of "Where the path turns"; the module doc of
//! `migration.rs` maps each arrow to its test.

use super::*;
use crate::api::annotations::READ_REQUESTED_AT;
use crate::lifecycle::test_support::{
    self as support, approval, at, binding, digest, doc_names_only_existing_tests, epoch, evidence,
    git_source, machine_drivers, person, set_annotation, true_reason,
};

// ----- fixtures -------------------------------------------------------------

fn migration(kind: &str) -> PtahMigration {
    support::resource("PtahMigration", "migrations", kind)
}

fn apply_policy(m: &mut PtahMigration, apply: ApplyPolicy) {
    m.spec.policy.apply = apply;
}

fn cm_source(n: u8) -> SourceStatus {
    support::cm_source("migrations", n)
}

fn oci_source(n: u8) -> SourceStatus {
    support::oci_source("migrations", n)
}

fn planned(version: i64) -> PlannedMigration {
    PlannedMigration {
        version,
        version_key: None,
        description: Some(format!("step {version}")),
        checksum: format!("h1:{version}"),
        checkpoint: false,
        transaction_mode: None,
    }
}

/// A reading of database `identity` with history fingerprint `fp`.
fn reading(verdict: HistoryVerdict, identity: u8, fp: u8) -> Observation {
    let dirty = verdict == HistoryVerdict::Dirty;
    Observation::HistoryRead(HistoryReading {
        verdict,
        history: MigrationHistory {
            fingerprint: Some(digest(fp)),
            target_identity_digest: Some(digest(identity)),
            current_version: Some(2),
            dirty,
            ..MigrationHistory::default()
        },
    })
}

fn pending_reading(identity: u8, fp: u8) -> Observation {
    reading(
        HistoryVerdict::Pending(vec![planned(3), planned(4)]),
        identity,
        fp,
    )
}

fn clean_reading(identity: u8, fp: u8) -> Observation {
    reading(HistoryVerdict::NothingPending, identity, fp)
}

fn mplan(n: u8) -> MigrationPlanSummary {
    MigrationPlanSummary {
        name: format!("orders-plan-{n}"),
        uid: format!("plan-uid-{n}"),
        fingerprint: digest(100 + n),
        from_version: Some(2),
        to_version: Some(4),
        steps: Some(2),
        approval_required: false,
        created_at: None,
    }
}

fn approval_of(p: &MigrationPlanSummary, uid: &str) -> ApprovalSeen {
    approval(uid, &p.uid, &p.fingerprint)
}

fn ended(outcome: RunEnd, identity: Option<u8>) -> Observation {
    Observation::RunEnded(RunReport {
        outcome,
        applied_versions: vec![3, 4],
        job_uid: Some("job-uid".into()),
        target_identity_digest: identity.map(digest),
        message: None,
    })
}

fn ack(operation_id: &str) -> AcknowledgmentSeen {
    AcknowledgmentSeen {
        name: "ack-orders".into(),
        uid: "ack-uid".into(),
        operation_id: operation_id.into(),
        acknowledged_by: Some(person("bob")),
    }
}

machine_drivers!(PtahMigration, PtahMigrationStatus, P);

fn cond_of(m: &PtahMigration, t: C) -> Option<(ConditionStatus, Reason)> {
    conditions::get(&st(m).conditions, t).map(|c| (c.status, c.reason))
}

fn entries(m: &PtahMigration, t: JournalEntryType) -> Vec<&JournalEntry> {
    st(m).journal.iter().filter(|e| e.type_ == t).collect()
}

/// A ConfigMap migration in Reading, its History claim dispatched, at t=1.
fn reading_cm() -> PtahMigration {
    let mut m = migration("configmap");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 1);
    m
}

/// An OCI migration resolved at t=1, Verifying.
fn verifying_oci() -> PtahMigration {
    let mut m = migration("oci");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(oci_source(1)), 1);
    m
}

/// Published and waiting for an approval of `mplan(1)`, at t=3.
fn awaiting() -> PtahMigration {
    let mut m = reading_cm();
    run(&mut m, pending_reading(1, 50), 2);
    run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    m
}

/// An approved run dispatched, at t=5.
fn applying() -> PtahMigration {
    let mut m = awaiting();
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        4,
    );
    run(&mut m, lease(1), 5);
    m
}

/// The run's Apply claim ID.
fn apply_id(m: &PtahMigration) -> String {
    claim(m).expect("apply claim").operation_id.clone()
}

/// A run that failed before it selected any version, at t=6.
fn stopped_before_selection() -> PtahMigration {
    let mut m = applying();
    let failed = RunEnd::Failed {
        selected: false,
        failure: None,
    };
    run(&mut m, ended(failed, Some(1)), 6);
    m
}

/// The run's verification, if a reading gave it one.
fn verification(m: &PtahMigration) -> Option<RunVerification> {
    st(m).last_run.as_ref().and_then(|r| r.verification.clone())
}

/// An unresolved Partial run that named database 1, at t=6.
fn held() -> (PtahMigration, String) {
    let mut m = applying();
    let id = apply_id(&m);
    run(&mut m, ended(RunEnd::Partial { failure: None }, Some(1)), 6);
    (m, id)
}

// ----- "From the source to a plan" -------------------------------------------

#[test]
fn new_oci_source_goes_resolving() {
    let mut m = migration("oci");
    let fx = run(&mut m, Observation::Pass, 0);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn new_git_source_goes_resolving() {
    let mut m = migration("git");
    let fx = run(&mut m, Observation::Pass, 0);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn configmap_source_skips_resolving_to_reading() {
    let mut m = migration("configmap");
    let fx = run(&mut m, Observation::Pass, 0);
    assert!(fx.contains(&Effect::TakeSnapshot));
    assert_eq!(
        phase(&m),
        None,
        "a new resource has no phase until its read"
    );
    assert_eq!(claim(&m), None, "the manager takes the snapshot: no Job");
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(1)), 1);
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(started(&fx, OperationType::History));
    assert_eq!(
        cond_of(&m, C::ArtifactResolved),
        Some((ConditionStatus::True, Reason::SnapshotTaken))
    );
}

#[test]
fn resolving_oci_digest_pinned_goes_verifying() {
    let mut m = migration("oci");
    run(&mut m, Observation::Pass, 0);
    let fx = run(&mut m, Observation::SourceResolved(oci_source(1)), 1);
    assert_eq!(phase(&m), Some(P::Verifying));
    assert!(started(&fx, OperationType::Verify));
    assert_eq!(
        cond_of(&m, C::ArtifactResolved),
        Some((ConditionStatus::True, Reason::DigestPinned))
    );
}

#[test]
fn new_flux_source_goes_resolving() {
    let mut m = migration("flux-git");
    let fx = run(&mut m, Observation::Pass, 0);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn resolving_flux_artifact_snapshotted_goes_reading() {
    let mut m = migration("flux-git");
    run(&mut m, Observation::Pass, 0);
    let fx = run(
        &mut m,
        Observation::SourceResolved(crate::lifecycle::test_support::flux_source(1, false)),
        1,
    );
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(started(&fx, OperationType::History));
    assert_eq!(
        cond_of(&m, C::ArtifactResolved),
        Some((ConditionStatus::True, Reason::SnapshotTaken))
    );
}

#[test]
fn resolving_flux_oci_repository_under_a_policy_goes_verifying() {
    let mut m = migration("flux-oci");
    run(&mut m, Observation::Pass, 0);
    let fx = run(
        &mut m,
        Observation::SourceResolved(crate::lifecycle::test_support::flux_source(1, true)),
        1,
    );
    assert_eq!(phase(&m), Some(P::Verifying));
    assert!(started(&fx, OperationType::Verify));
}

#[test]
fn resolving_git_commit_goes_reading() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    let fx = run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(started(&fx, OperationType::History));
    assert_eq!(
        cond_of(&m, C::ArtifactResolved),
        Some((ConditionStatus::True, Reason::CommitResolved))
    );
}

#[test]
fn verifying_policy_satisfied_goes_reading() {
    let mut m = verifying_oci();
    let fx = run(&mut m, Observation::VerificationSatisfied(evidence(9)), 2);
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(started(&fx, OperationType::History));
    assert!(
        st(&m)
            .source
            .as_ref()
            .is_some_and(|s| s.verification.is_some())
    );
}

#[test]
fn verifying_policy_refused_goes_blocked() {
    let mut m = verifying_oci();
    let fx = run(
        &mut m,
        Observation::VerificationRefused {
            message: "no signature".into(),
        },
        2,
    );
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::PolicyRefused));
    assert!(!started(&fx, OperationType::History));
}

#[test]
fn reading_nothing_pending_goes_in_sync() {
    let mut m = reading_cm();
    let fx = run(&mut m, clean_reading(1, 50), 2);
    assert_eq!(phase(&m), Some(P::InSync));
    assert_eq!(
        cond_of(&m, C::Ready),
        Some((ConditionStatus::True, Reason::HistoryMatched))
    );
    assert_eq!(claim(&m), None);
    assert!(!fx.iter().any(|e| matches!(e, Effect::PublishPlan { .. })));
    assert!(
        st(&m).journal.is_empty(),
        "a cycle that finds nothing to do writes no entry"
    );
    assert_eq!(st(&m).next_reconciliation_time, Some(at(602)));
}

#[test]
fn reading_pending_versions_goes_planning() {
    let mut m = reading_cm();
    let fx = run(&mut m, pending_reading(1, 50), 2);
    assert_eq!(phase(&m), Some(P::Planning));
    let publish = fx.iter().find_map(|e| match e {
        Effect::PublishPlan {
            migrations,
            history_fingerprint,
            ..
        } => Some((migrations.clone(), history_fingerprint.clone())),
        _ => None,
    });
    let (migrations, fp) = publish.expect("PublishPlan");
    assert_eq!(
        migrations.iter().map(|p| p.version).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(fp, Some(digest(50)));
    assert_eq!(
        cond_of(&m, C::Progressing),
        Some((ConditionStatus::True, Reason::MigrationsPending))
    );
}

fn refusal(verdict: HistoryVerdict, reason: Reason) {
    let mut m = reading_cm();
    let fx = run(&mut m, reading(verdict, 1, 50), 2);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(reason));
    assert_eq!(
        cond_of(&m, C::Blocked),
        Some((ConditionStatus::True, reason))
    );
    assert!(!fx.iter().any(|e| matches!(e, Effect::PublishPlan { .. })));
    assert_eq!(
        st(&m).next_reconciliation_time,
        Some(at(602)),
        "it keeps reading at its interval"
    );
}

#[test]
fn reading_dirty_goes_blocked_history_dirty() {
    refusal(HistoryVerdict::Dirty, Reason::HistoryDirty);
}

#[test]
fn reading_modified_goes_blocked_history_modified() {
    refusal(HistoryVerdict::Modified, Reason::HistoryModified);
}

#[test]
fn reading_out_of_order_goes_blocked_history_out_of_order() {
    refusal(HistoryVerdict::OutOfOrder, Reason::HistoryOutOfOrder);
}

#[test]
fn reading_ahead_goes_blocked_history_ahead() {
    refusal(HistoryVerdict::Ahead, Reason::HistoryAhead);
}

#[test]
fn reading_pending_with_unsettled_run_goes_blocked_publishes_no_plan() {
    let (mut m, _) = held();
    // The interval read: Resolving → Reading → pending versions.
    run(&mut m, Observation::Pass, 700);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 701);
    assert_eq!(phase(&m), Some(P::Reading));
    let fx = run(&mut m, pending_reading(1, 51), 702);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::OutcomeUnknown));
    assert!(!fx.iter().any(|e| matches!(e, Effect::PublishPlan { .. })));
    assert!(st(&m).unresolved_run.is_some());
    assert_eq!(st(&m).plan, None);
}

#[test]
fn awaiting_approval_reads_in_progress_to_kstatus_naming_the_plan() {
    let m = awaiting();
    assert_eq!(
        cond_of(&m, C::Reconciling).map(|c| c.0),
        Some(ConditionStatus::True)
    );
    assert_eq!(
        cond_of(&m, C::Stalled).map(|c| c.0),
        Some(ConditionStatus::False)
    );
    assert_eq!(
        cond_of(&m, C::Ready),
        Some((ConditionStatus::False, Reason::AwaitingApproval))
    );
    let ready = st(&m)
        .conditions
        .iter()
        .find(|c| c.type_ == C::Ready)
        .expect("Ready");
    let plan = st(&m).plan.as_ref().expect("plan");
    assert_eq!(
        ready.message,
        format!("plan {} waits for an approval", plan.name)
    );
}

#[test]
fn planning_on_approval_goes_awaiting_approval() {
    let m = awaiting();
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    assert_eq!(
        cond_of(&m, C::ApprovalRequired),
        Some((ConditionStatus::True, Reason::AwaitingApproval))
    );
    assert_eq!(
        st(&m).plan.as_ref().map(|p| p.approval_required),
        Some(true)
    );
    let published = entries(&m, JournalEntryType::PlanPublished);
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].plan_uid.as_deref(), Some("plan-uid-1"));
    assert_eq!(claim(&m), None);
}

#[test]
fn planning_always_goes_applying() {
    let mut m = reading_cm();
    apply_policy(&mut m, ApplyPolicy::Always);
    run(&mut m, pending_reading(1, 50), 2);
    let fx = run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    assert_eq!(phase(&m), Some(P::Applying));
    assert_eq!(claim_type(&m), Some(OperationType::Apply));
    assert_eq!(
        claim(&m).and_then(|c| c.authorization),
        Some(Authorization::Policy)
    );
    assert!(
        fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })),
        "Apply takes the realm Lease first"
    );
    assert!(!started(&fx, OperationType::Apply));
}

#[test]
fn planning_apply_never_rests_in_planning_ready_false_apply_disabled() {
    let mut m = reading_cm();
    apply_policy(&mut m, ApplyPolicy::Never);
    run(&mut m, pending_reading(1, 50), 2);
    let fx = run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    assert_eq!(phase(&m), Some(P::Planning));
    assert_eq!(
        cond_of(&m, C::Ready),
        Some((ConditionStatus::False, Reason::ApplyDisabled))
    );
    assert_ne!(phase(&m), Some(P::Blocked), "apply: Never is not Blocked");
    assert_eq!(stalled_reason(&m), None);
    let ready = conditions::get(&st(&m).conditions, C::Ready).expect("Ready");
    for part in [
        mplan(1).name.as_str(),
        "spec.policy.apply is Never",
        "OnApproval",
    ] {
        assert!(ready.message.contains(part), "{}", ready.message);
    }
    assert_eq!(claim(&m), None);
    assert!(!fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
    // An approval of the plan starts nothing under Never.
    let fx = run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "a")),
        4,
    );
    assert!(fx.iter().all(|e| !matches!(e, Effect::AcquireLease { .. })));
    // It stays in Planning across passes inside the interval.
    run(&mut m, Observation::Pass, 100);
    assert_eq!(phase(&m), Some(P::Planning));
    assert_eq!(
        st(&m).plan.as_ref().map(|p| p.uid.as_str()),
        Some("plan-uid-1")
    );
}

// ----- "From a plan to the verdict on its run" -------------------------------

#[test]
fn awaiting_approval_exact_approval_goes_applying() {
    let mut m = awaiting();
    let mut other = approval_of(&mplan(1), "x");
    other.plan_fingerprint = digest(7);
    run(&mut m, Observation::ApprovalExists(other), 4);
    assert_eq!(
        phase(&m),
        Some(P::AwaitingApproval),
        "an approval of another fingerprint authorizes nothing"
    );
    let fx = run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        4,
    );
    assert_eq!(phase(&m), Some(P::Applying));
    let c = claim(&m).expect("claim");
    assert_eq!(c.authorization, Some(Authorization::Approval));
    assert_eq!(c.approval_uid.as_deref(), Some("approval-uid"));
    assert_eq!(c.plan_uid.as_deref(), Some("plan-uid-1"));
    assert!(fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
}

#[test]
fn planning_interval_ends_goes_resolving() {
    let mut m = migration("git");
    apply_policy(&mut m, ApplyPolicy::Never);
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, pending_reading(1, 50), 2);
    run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    assert_eq!(phase(&m), Some(P::Planning));
    let fx = run(&mut m, Observation::Pass, 603);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    assert!(
        st(&m).plan.is_some(),
        "the reading decides whether it holds"
    );
}

#[test]
fn awaiting_approval_interval_ends_goes_resolving() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, pending_reading(1, 50), 2);
    run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    run(&mut m, Observation::Pass, 100);
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    let fx = run(&mut m, Observation::Pass, 603);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn awaiting_approval_plan_stale_goes_pending() {
    let mut m = awaiting();
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 10);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(st(&m).plan, None);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::RetirePlan { name, .. } if name == "orders-plan-1"))
    );
    assert!(has_event(&fx, Reason::PlanStale));
    // The next pass reads again.
    let fx = run(&mut m, Observation::Pass, 11);
    assert!(fx.contains(&Effect::TakeSnapshot));
}

#[test]
fn planning_plan_stale_goes_pending() {
    let mut m = reading_cm();
    apply_policy(&mut m, ApplyPolicy::Never);
    run(&mut m, pending_reading(1, 50), 2);
    run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    let fx = run(&mut m, Observation::ExecutionBindingChanged(binding(2)), 10);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(st(&m).plan, None);
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::RetirePlan {
            reason: Reason::ExecutionBindingChanged,
            ..
        }
    )));
}

#[test]
fn applying_applied_goes_verifying_history() {
    let mut m = applying();
    let fx = run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    assert_eq!(phase(&m), Some(P::VerifyingHistory));
    assert_eq!(claim(&m), None);
    assert!(fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
    assert!(fx.contains(&Effect::RequeueAt(at(6))));
    let run_ = st(&m).last_run.as_ref().expect("lastRun");
    assert_eq!(run_.outcome, RunOutcome::Applied);
    assert_eq!(run_.applied_versions, vec![3, 4]);
}

#[test]
fn applying_nothing_to_do_goes_verifying_history() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::NothingToDo, Some(1)), 6);
    assert_eq!(phase(&m), Some(P::VerifyingHistory));
    assert_eq!(
        st(&m).last_run.as_ref().map(|r| r.outcome),
        Some(RunOutcome::UpToDate)
    );
}

#[test]
fn applying_failed_past_selection_goes_verifying_history() {
    let mut m = applying();
    let failure = RunFailure {
        version: 3,
        statement_position: Some(2),
        sqlstate: Some("23505".into()),
        mysql_errno: None,
    };
    run(
        &mut m,
        ended(
            RunEnd::Failed {
                selected: true,
                failure: Some(failure.clone()),
            },
            Some(1),
        ),
        6,
    );
    assert_eq!(phase(&m), Some(P::VerifyingHistory));
    let r = st(&m).last_run.as_ref().expect("lastRun");
    assert_eq!(r.outcome, RunOutcome::Failed);
    assert_eq!(r.failure.as_ref(), Some(&failure));
    let finished = entries(&m, JournalEntryType::RunFinished);
    assert_eq!(finished[0].failure.as_ref(), Some(&failure));
    assert_eq!(st(&m).unresolved_run, None);
}

#[test]
fn applying_stopped_before_selection_goes_failed() {
    let mut m = stopped_before_selection();
    assert_eq!(phase(&m), Some(P::Failed));
    assert_eq!(claim(&m), None);
    assert_eq!(st(&m).next_reconciliation_time, Some(at(36)));
    // It starts again from resolution after failureRetryInterval.
    let fx = run(&mut m, Observation::Pass, 20);
    assert!(!fx.contains(&Effect::TakeSnapshot));
    let fx = run(&mut m, Observation::Pass, 36);
    assert!(fx.contains(&Effect::TakeSnapshot));
}

#[test]
fn applying_partial_goes_blocked_with_unresolved_run() {
    let mut m = applying();
    let id = apply_id(&m);
    let out = step(
        &m,
        &ended(RunEnd::Partial { failure: None }, Some(1)),
        &at(6),
    );
    m.status = Some(out.status.clone());
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::OutcomeUnknown));
    let u = st(&m).unresolved_run.as_ref().expect("unresolvedRun");
    assert_eq!(u.operation_id, id);
    assert_eq!(u.outcome, RunOutcome::Partial);
    assert_eq!(u.target_identity_digest, Some(digest(1)));
    assert_eq!(u.approval_uid.as_deref(), Some("approval-uid"));
    let before: Vec<_> = out.before_status().collect();
    assert_eq!(before, vec![&Effect::WriteUnresolvedAnnotation(u.clone())]);
}

#[test]
fn applying_unknown_goes_blocked_with_unresolved_run() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::Unknown { failure: None }, Some(1)), 6);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(
        st(&m).unresolved_run.as_ref().map(|u| u.outcome),
        Some(RunOutcome::Unknown)
    );
}

#[test]
fn applying_job_lost_goes_blocked_unknown() {
    let mut m = applying();
    let fx = run(&mut m, Observation::JobLost, 6);
    assert_eq!(phase(&m), Some(P::Blocked));
    let u = st(&m).unresolved_run.as_ref().expect("hold");
    assert_eq!(u.outcome, RunOutcome::Unknown);
    assert_eq!(
        u.target_identity_digest,
        Some(digest(1)),
        "no result: the hold names the planned database"
    );
    assert_eq!(
        st(&m)
            .last_run
            .as_ref()
            .and_then(|r| r.target_identity_digest.clone()),
        None,
        "lastRun names only what a result named"
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::WriteUnresolvedAnnotation(_)))
    );
}

#[test]
fn applying_job_failed_without_result_goes_blocked_unknown() {
    let mut m = applying();
    run(&mut m, failed("pod evicted"), 6);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(
        st(&m).unresolved_run.as_ref().map(|u| u.outcome),
        Some(RunOutcome::Unknown)
    );
    assert_ne!(phase(&m), Some(P::Failed));
}

#[test]
fn applying_withdrawn_before_job_goes_pending() {
    let mut m = awaiting();
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        4,
    );
    assert_eq!(phase(&m), Some(P::Applying));
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 5);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(claim(&m), None);
    assert_eq!(st(&m).plan, None);
    assert!(!started(&fx, OperationType::Apply));
    assert!(
        entries(&m, JournalEntryType::ApprovalAccepted).is_empty(),
        "a claim withdrawn before dispatch leaves the approval to the next one"
    );
}

#[test]
fn applying_withdrawn_approval_gone_goes_pending() {
    let mut m = awaiting();
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        4,
    );
    run(&mut m, Observation::ApprovalAbsent, 5);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(claim(&m), None);
}

#[test]
fn applying_job_unbuildable_goes_failed_claim_tries_again() {
    let mut m = applying();
    let id = apply_id(&m);
    run(&mut m, pod_refused("denied"), 6);
    assert_eq!(phase(&m), Some(P::Failed));
    let c = claim(&m).expect("the claim stays");
    assert!(!c.dispatch_started);
    assert_eq!(c.retry_not_before, Some(at(36)));
    let fx = run(&mut m, Observation::Pass, 36);
    assert!(started(&fx, OperationType::Apply));
    assert_eq!(apply_id(&m), id);
    assert_eq!(claim(&m).map(|c| c.attempt), Some(2));
    assert_eq!(phase(&m), Some(P::Applying));
    assert_eq!(
        entries(&m, JournalEntryType::ApprovalAccepted).len(),
        1,
        "no Job existed: the approval is not spent twice"
    );
}

#[test]
fn verifying_history_next_pass_claims_reading() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    assert_eq!(phase(&m), Some(P::VerifyingHistory));
    let fx = run(&mut m, Observation::Pass, 6);
    assert_eq!(phase(&m), Some(P::Reading));
    assert_eq!(claim_type(&m), Some(OperationType::History));
    assert!(started(&fx, OperationType::History));
    assert!(!fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
    // Its result is the verdict.
    run(&mut m, clean_reading(1, 60), 7);
    assert_eq!(phase(&m), Some(P::InSync));
}

#[test]
fn insync_interval_ends_goes_resolving() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, clean_reading(1, 50), 2);
    assert_eq!(phase(&m), Some(P::InSync));
    run(&mut m, Observation::Pass, 300);
    assert_eq!(phase(&m), Some(P::InSync));
    let fx = run(&mut m, Observation::Pass, 602);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn insync_input_changed_goes_resolving() {
    // A source policy replaced: Git resolves again at once.
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, clean_reading(1, 50), 2);
    let fx = run(&mut m, Observation::SourceChanged, 10);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    // An edit of the spec reads again too.
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, clean_reading(1, 50), 2);
    m.metadata.generation = Some(2);
    let fx = run(&mut m, Observation::GenerationMoved, 10);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    // A ConfigMap edit of a selected key: a new snapshot, straight to Reading.
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    let fx = run(&mut m, Observation::SourceChanged, 10);
    assert!(fx.contains(&Effect::TakeSnapshot));
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 11);
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(started(&fx, OperationType::History));
    // An edit of an unselected key: the same snapshot starts nothing.
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(1)), 11);
    assert_eq!(phase(&m), Some(P::InSync));
    assert!(!started(&fx, OperationType::History));
}

// ----- "What leaves that path, and how it comes back" ------------------------

#[test]
fn idle_realm_conflict_goes_blocked() {
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    run(&mut m, Observation::Realm(RealmVerdict::Conflict), 3);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::RealmConflict));
}

#[test]
fn idle_realm_not_authorized_goes_blocked() {
    let mut m = migration("git");
    run(&mut m, Observation::Realm(RealmVerdict::NotAuthorized), 0);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::RealmNotAuthorized));
    let fx = run(&mut m, Observation::Realm(RealmVerdict::Ok), 10);
    assert_eq!(
        phase(&m),
        Some(P::Resolving),
        "the pipeline starts once it ends"
    );
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn realm_blocked_rechecks_within_a_minute() {
    let mut m = migration("git");
    let fx = run(&mut m, Observation::Realm(RealmVerdict::Conflict), 0);
    assert!(fx.contains(&Effect::RequeueAt(at(60))));
    let fx = run(&mut m, Observation::Pass, 60);
    assert!(!started(&fx, OperationType::Resolve), "the census decides");
}

#[test]
fn idle_unsupported_engine_goes_blocked() {
    let mut m = migration("git");
    m.spec.target.engine = "Oracle".into();
    assert!(!engine_supported(&m));
    let fx = run(&mut m, Observation::EngineUnsupported, 0);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::UnsupportedEngine));
    assert!(!fx.iter().any(|e| matches!(e, Effect::RequeueAt(_))));
    let fx = run(&mut m, Observation::Pass, 10_000);
    assert!(
        !started(&fx, OperationType::Resolve),
        "it waits for an edit"
    );
}

#[test]
fn idle_suspend_goes_suspended() {
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    m.spec.suspend = true;
    let fx = run(&mut m, Observation::SuspendChanged, 3);
    assert_eq!(phase(&m), Some(P::Suspended));
    assert!(has_event(&fx, Reason::Suspended));
    let fx = run(&mut m, Observation::Pass, 10_000);
    assert!(!fx.contains(&Effect::TakeSnapshot), "no new Jobs");
}

#[test]
fn idle_source_refused_before_job_goes_failed() {
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    run(
        &mut m,
        Observation::SourceRefused {
            message: "sourcePolicy.maxBytes".into(),
        },
        3,
    );
    assert_eq!(phase(&m), Some(P::Failed));
    assert_eq!(
        cond_of(&m, C::ReconciliationFailed),
        Some((ConditionStatus::True, Reason::SourcePolicyRefused))
    );
}

#[test]
fn idle_configuration_error_goes_failed() {
    let mut m = migration("git");
    run(
        &mut m,
        Observation::ConfigurationError {
            message: "spec.execution.serviceAccountName".into(),
        },
        0,
    );
    assert_eq!(phase(&m), Some(P::Failed));
    assert_eq!(st(&m).next_reconciliation_time, Some(at(30)));
}

#[test]
fn plan_not_published_goes_failed() {
    let mut m = reading_cm();
    run(&mut m, pending_reading(1, 50), 2);
    run(
        &mut m,
        Observation::PlanNotPublished {
            message: "plan.spec.migrations: more than 256".into(),
        },
        3,
    );
    assert_eq!(phase(&m), Some(P::Failed));
    assert_eq!(st(&m).plan, None);
}

#[test]
fn read_job_failed_stays_in_phase_retries_after_interval() {
    let mut m = reading_cm();
    let id = claim(&m).expect("claim").operation_id.clone();
    let fx = run(&mut m, failed("connection refused"), 2);
    assert_eq!(
        phase(&m),
        Some(P::Reading),
        "a failed read does not show Failed"
    );
    assert_eq!(
        cond_of(&m, C::Progressing),
        Some((ConditionStatus::True, Reason::OperationFailed))
    );
    assert!(has_event(&fx, Reason::OperationFailed));
    assert!(fx.contains(&Effect::RequeueAt(at(32))));
    let fx = run(&mut m, Observation::Pass, 20);
    assert!(!started(&fx, OperationType::History));
    let fx = run(&mut m, Observation::Pass, 32);
    assert!(started(&fx, OperationType::History));
    let c = claim(&m).expect("claim");
    assert_eq!((c.operation_id.as_str(), c.attempt), (id.as_str(), 2));
    assert_eq!(
        entries(&m, JournalEntryType::OperationFailed)[0].operation,
        Some(OperationType::History)
    );
}

#[test]
fn read_inputs_changed_goes_pending() {
    let mut m = reading_cm();
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 2);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(claim(&m), None);
    assert!(has_event(&fx, Reason::InputsChanged));
    // The discarded read's result is not taken.
    run(&mut m, clean_reading(1, 50), 3);
    assert_eq!(phase(&m), Some(P::Pending));
}

#[test]
fn read_execution_binding_changed_goes_pending() {
    let mut m = reading_cm();
    run(&mut m, Observation::ExecutionBindingChanged(binding(3)), 2);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(st(&m).execution_binding, Some(binding(3)));
}

#[test]
fn read_under_way_suspend_goes_pending_then_suspended() {
    let mut m = reading_cm();
    m.spec.suspend = true;
    run(&mut m, Observation::SuspendChanged, 2);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(claim(&m), None);
    run(&mut m, Observation::Pass, 3);
    assert_eq!(phase(&m), Some(P::Suspended));
}

#[test]
fn read_gives_way_to_read_request_goes_pending() {
    let mut m = reading_cm();
    run(&mut m, failed("timeout"), 2);
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:00:10Z");
    let fx = run(&mut m, Observation::ReadRequest, 10);
    assert_eq!(
        claim_type(&m),
        Some(OperationType::History),
        "inside the delay"
    );
    assert!(!has_event(&fx, Reason::ReadRestarted));
    let fx = run(&mut m, Observation::Pass, 32);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(claim(&m), None);
    assert!(has_event(&fx, Reason::ReadRestarted));
    assert_eq!(
        st(&m).last_read_request.as_deref(),
        Some("2026-01-01T00:00:10Z")
    );
    let fx = run(&mut m, Observation::Pass, 33);
    assert!(fx.contains(&Effect::TakeSnapshot), "a new Resolve");
}

#[test]
fn read_job_unbuildable_goes_failed() {
    let mut m = reading_cm();
    run(&mut m, pod_refused("denied"), 2);
    assert_eq!(phase(&m), Some(P::Failed));
    assert_eq!(
        cond_of(&m, C::ReconciliationFailed),
        Some((ConditionStatus::True, Reason::PodAdmissionRefused))
    );
}

#[test]
fn blocked_interval_ends_goes_resolving() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, reading(HistoryVerdict::Dirty, 1, 50), 2);
    run(&mut m, Observation::Pass, 100);
    assert_eq!(phase(&m), Some(P::Blocked));
    let fx = run(&mut m, Observation::Pass, 602);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn blocked_input_changed_goes_resolving() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, reading(HistoryVerdict::Modified, 1, 50), 2);
    let fx = run(&mut m, Observation::SourceChanged, 3);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn failed_goes_resolving_after_retry_interval() {
    let mut m = migration("git");
    run(
        &mut m,
        Observation::ConfigurationError {
            message: "x".into(),
        },
        0,
    );
    let fx = run(&mut m, Observation::Pass, 29);
    assert!(!started(&fx, OperationType::Resolve));
    let fx = run(&mut m, Observation::Pass, 30);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn pending_next_pass_goes_resolving() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::GenerationMoved, 1);
    assert_eq!(phase(&m), Some(P::Pending));
    let fx = run(&mut m, Observation::Pass, 2);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn suspended_resumed_goes_resolving() {
    let mut m = migration("git");
    m.spec.suspend = true;
    run(&mut m, Observation::Pass, 0);
    assert_eq!(phase(&m), Some(P::Suspended));
    m.spec.suspend = false;
    m.metadata.generation = Some(2);
    let fx = run(&mut m, Observation::GenerationMoved, 5);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

// ----- "Where the path turns" ------------------------------------------------

#[test]
fn approval_of_a_replaced_plan_authorizes_nothing() {
    let mut m = awaiting();
    // The interval reading finds another history: a new plan replaces it.
    run(&mut m, Observation::Pass, 603);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 604);
    run(&mut m, pending_reading(1, 51), 605);
    let fx = run(&mut m, Observation::PlanPublished(mplan(2)), 606);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::RetirePlan { name, .. } if name == "orders-plan-1"))
    );
    assert!(has_event(&fx, Reason::PlanStale));
    let fx = run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "old")),
        607,
    );
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    assert!(fx.iter().all(|e| !matches!(e, Effect::AcquireLease { .. })));
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(2), "new")),
        608,
    );
    assert_eq!(phase(&m), Some(P::Applying));
}

#[test]
fn failed_run_dirty_row_holds_blocked_history_dirty() {
    let mut m = applying();
    run(
        &mut m,
        ended(
            RunEnd::Failed {
                selected: true,
                failure: None,
            },
            Some(1),
        ),
        6,
    );
    run(&mut m, Observation::Pass, 7);
    run(&mut m, reading(HistoryVerdict::Dirty, 1, 52), 8);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(stalled_reason(&m), Some(Reason::HistoryDirty));
    let v = verification(&m).expect("verification");
    assert_eq!(v.outcome, VerificationOutcome::Blocked);
    assert_eq!(v.reason, Some(Reason::HistoryDirty));
}

#[test]
fn failed_run_spent_its_approval_next_plan_needs_new_one() {
    let mut m = stopped_before_selection();
    // Retried after failureRetryInterval: the same history gives the same plan.
    run(&mut m, Observation::Pass, 36);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 37);
    run(&mut m, pending_reading(1, 50), 38);
    run(&mut m, Observation::PlanPublished(mplan(1)), 39);
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    assert_eq!(
        entries(&m, JournalEntryType::PlanPublished).len(),
        1,
        "the journal already holds the plan"
    );
    let fx = run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        40,
    );
    assert_eq!(
        phase(&m),
        Some(P::AwaitingApproval),
        "the run spent the approval it carried"
    );
    assert!(fx.iter().all(|e| !matches!(e, Effect::AcquireLease { .. })));
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid-2")),
        41,
    );
    assert_eq!(phase(&m), Some(P::Applying));
}

#[test]
fn unresolved_run_dispatches_no_apply_until_settled() {
    let (mut m, _) = held();
    // No Apply claim while it holds, whatever arrives.
    for (i, o) in [
        Observation::Pass,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid-2")),
        Observation::PlanPublished(mplan(2)),
    ]
    .into_iter()
    .enumerate()
    {
        let fx = run(&mut m, o, 10 + i as i64);
        assert!(
            fx.iter()
                .all(|e| !matches!(e, Effect::AcquireLease { .. } | Effect::PublishPlan { .. }))
        );
        assert_eq!(phase(&m), Some(P::Blocked));
    }
    assert!(st(&m).unresolved_run.is_some());
}

#[test]
fn clean_reading_of_that_database_settles_unresolved_run() {
    let (mut m, id) = held();
    run(&mut m, Observation::Pass, 700);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 701);
    // A clean reading of another database settles nothing.
    let mut other = m.clone();
    run(&mut other, clean_reading(9, 60), 702);
    assert!(st(&other).unresolved_run.is_some());
    assert_eq!(phase(&other), Some(P::Blocked));
    assert_eq!(stalled_reason(&other), Some(Reason::OutcomeUnknown));
    let fx = run(&mut m, clean_reading(1, 60), 702);
    assert_eq!(st(&m).unresolved_run, None);
    assert_eq!(phase(&m), Some(P::InSync));
    let r = st(&m).resolved_run.as_ref().expect("resolvedRun");
    assert_eq!(r.operation_id, id);
    assert_eq!(r.resolution, Resolution::HistoryRead);
    assert!(fx.contains(&Effect::ClearUnresolvedAnnotation));
}

#[test]
fn acknowledgment_releases_unresolved_run_next_plan_needs_new_approval() {
    let (mut m, id) = held();
    let fx = run(&mut m, Observation::Acknowledged(ack(&id)), 10);
    assert_eq!(st(&m).unresolved_run, None);
    let r = st(&m).resolved_run.as_ref().expect("resolvedRun");
    assert_eq!(r.resolution, Resolution::Acknowledged);
    assert_eq!(r.acknowledgment_name.as_deref(), Some("ack-orders"));
    assert!(fx.contains(&Effect::ClearUnresolvedAnnotation));
    assert!(
        fx.contains(&Effect::TakeSnapshot),
        "it reads its history again"
    );
    let e = entries(&m, JournalEntryType::RunAcknowledged);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].outcome, Some(JournalOutcome::Partial));
    assert_eq!(
        e[0].acknowledged_by.as_ref().map(|i| i.username.as_str()),
        Some("bob")
    );
    // What is still pending is planned again and needs its own approval.
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 11);
    run(&mut m, pending_reading(1, 53), 12);
    run(&mut m, Observation::PlanPublished(mplan(3)), 13);
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(3), "approval-uid")),
        14,
    );
    assert_eq!(
        phase(&m),
        Some(P::AwaitingApproval),
        "the spent approval authorizes nothing"
    );
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(3), "approval-uid-3")),
        15,
    );
    assert_eq!(phase(&m), Some(P::Applying));
}

#[test]
fn acknowledgment_of_another_run_settles_nothing() {
    let (mut m, _) = held();
    let fx = run(&mut m, Observation::Acknowledged(ack(&digest(77))), 10);
    assert!(st(&m).unresolved_run.is_some());
    assert!(!fx.contains(&Effect::ClearUnresolvedAnnotation));
    let (mut m, id) = held();
    let mut unstamped = ack(&id);
    unstamped.acknowledged_by = None;
    run(&mut m, Observation::Acknowledged(unstamped), 10);
    assert!(
        st(&m).unresolved_run.is_some(),
        "admission stamps who acknowledged"
    );
}

#[test]
fn verified_pending_publishes_a_new_plan() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    run(&mut m, Observation::Pass, 7);
    let fx = run(&mut m, pending_reading(1, 54), 8);
    assert_eq!(phase(&m), Some(P::Planning));
    assert!(fx.iter().any(|e| matches!(e, Effect::PublishPlan { .. })));
    let v = entries(&m, JournalEntryType::Verified);
    assert_eq!(v[0].outcome, Some(JournalOutcome::Pending));
}

// ----- runs, the record and the journal ---------------------------------------

#[test]
fn history_takes_no_lease_apply_does() {
    let mut m = migration("configmap");
    run(&mut m, Observation::Pass, 0);
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(1)), 1);
    assert!(started(&fx, OperationType::History));
    assert!(fx.iter().all(|e| !matches!(e, Effect::AcquireLease { .. })));
    assert_eq!(claim(&m).and_then(|c| c.lease_epoch.clone()), None);
    let m = applying();
    let c = claim(&m).expect("apply");
    assert_eq!(c.lease_epoch, Some(epoch(1)));
    assert!(c.dispatch_started);
}

#[test]
fn approval_accepted_written_at_dispatch_spends_once() {
    let mut m = awaiting();
    let fx = run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        4,
    );
    assert!(
        fx.iter()
            .all(|e| !matches!(e, Effect::SpendApproval { .. }))
    );
    assert!(entries(&m, JournalEntryType::ApprovalAccepted).is_empty());
    let fx = run(&mut m, lease(1), 5);
    assert!(fx.contains(&Effect::SpendApproval {
        name: "approve-orders".into(),
        uid: "approval-uid".into(),
    }));
    assert!(started(&fx, OperationType::Apply));
    let a = entries(&m, JournalEntryType::ApprovalAccepted);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].operation_id, Some(apply_id(&m)));
    assert_eq!(a[0].approval_uid.as_deref(), Some("approval-uid"));
    // A second Lease report spends nothing again.
    let fx = run(&mut m, lease(2), 6);
    assert!(
        fx.is_empty()
            || fx
                .iter()
                .all(|e| !matches!(e, Effect::SpendApproval { .. }))
    );
}

#[test]
fn dispatched_run_is_never_dispatched_again() {
    let mut m = applying();
    for t in [6, 100, 10_000] {
        let fx = run(&mut m, Observation::Pass, t);
        assert!(!started(&fx, OperationType::Apply));
    }
    let fx = run(&mut m, Observation::LeaseLost, 10_001);
    assert!(!started(&fx, OperationType::Apply));
    assert_eq!(phase(&m), Some(P::Applying));
}

#[test]
fn exact_sequence_mismatch_records_failed_with_nothing_applied() {
    let mut m = applying();
    run(
        &mut m,
        Observation::RunEnded(RunReport {
            outcome: RunEnd::Failed {
                selected: false,
                failure: None,
            },
            applied_versions: Vec::new(),
            job_uid: Some("job-uid".into()),
            target_identity_digest: Some(digest(1)),
            message: Some("the selection differs from the approved sequence".into()),
        }),
        6,
    );
    let r = st(&m).last_run.as_ref().expect("lastRun");
    assert_eq!(r.outcome, RunOutcome::Failed);
    assert!(r.applied_versions.is_empty());
    assert_eq!(phase(&m), Some(P::Failed));
    assert_eq!(
        entries(&m, JournalEntryType::RunFinished)[0].applied_count,
        Some(0)
    );
}

#[test]
fn last_run_copies_identity_from_the_apply_claim() {
    let mut m = applying();
    let c = claim(&m).cloned().expect("claim");
    run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    let r = st(&m).last_run.as_ref().expect("lastRun");
    assert_eq!(r.operation_id, c.operation_id);
    assert_eq!(r.plan_name.as_deref(), Some("orders-plan-1"));
    assert_eq!(r.plan_uid.as_deref(), Some("plan-uid-1"));
    assert_eq!(r.plan_fingerprint, Some(digest(101)));
    assert_eq!(r.approval_name.as_deref(), Some("approve-orders"));
    assert_eq!(r.approval_uid.as_deref(), Some("approval-uid"));
    assert_eq!(
        r.approver.as_ref().map(|a| a.username.as_str()),
        Some("alice")
    );
    assert_eq!(r.authorization, Some(Authorization::Approval));
    assert_eq!(r.job_name, c.job_name);
    assert_eq!(r.job_uid.as_deref(), Some("job-uid"));
    assert_eq!(r.source, c.source);
    assert!(r.source.is_some());
    assert_eq!(r.coordination_digest, c.coordination_digest);
    assert!(r.coordination_digest.is_some());
    assert_eq!(r.target_identity_digest, Some(digest(1)));
    assert_eq!(r.started_at, Some(c.started_at));
    assert_eq!(r.finished_at, Some(at(6)));
    assert_eq!(r.verification, None);
}

#[test]
fn first_reading_of_the_named_database_verifies_the_run() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    run(&mut m, Observation::Pass, 7);
    run(&mut m, clean_reading(1, 60), 8);
    let v = verification(&m).expect("verification");
    assert_eq!(v.outcome, VerificationOutcome::InSync);
    assert_eq!(v.history_fingerprint, Some(digest(60)));
    assert_eq!(v.read_at, at(8));
    assert_eq!(entries(&m, JournalEntryType::Verified).len(), 1);
    // Later readings write no further entry.
    run(&mut m, Observation::Pass, 608);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 609);
    run(&mut m, clean_reading(1, 60), 610);
    assert_eq!(entries(&m, JournalEntryType::Verified).len(), 1);
}

#[test]
fn reading_of_another_database_does_not_verify_the_run() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    run(&mut m, Observation::Pass, 7);
    run(&mut m, clean_reading(9, 60), 8);
    assert_eq!(verification(&m), None);
    assert!(entries(&m, JournalEntryType::Verified).is_empty());
}

#[test]
fn run_that_named_no_database_gets_no_verification() {
    let mut m = applying();
    run(&mut m, ended(RunEnd::Applied, None), 6);
    run(&mut m, Observation::Pass, 7);
    run(&mut m, clean_reading(1, 60), 8);
    assert_eq!(phase(&m), Some(P::InSync));
    assert_eq!(verification(&m), None);
    assert!(entries(&m, JournalEntryType::Verified).is_empty());
}

#[test]
fn clean_reading_of_planned_database_settles_hold_of_run_without_result() {
    let mut m = applying();
    run(&mut m, Observation::JobLost, 6);
    assert!(st(&m).unresolved_run.is_some());
    run(&mut m, Observation::Pass, 606);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 607);
    let fx = run(&mut m, clean_reading(1, 60), 608);
    assert_eq!(st(&m).unresolved_run, None, "the hold is settled");
    assert_eq!(phase(&m), Some(P::InSync));
    assert!(fx.contains(&Effect::ClearUnresolvedAnnotation));
    assert!(
        entries(&m, JournalEntryType::Verified).is_empty(),
        "the run named no database: no verification"
    );
}

#[test]
fn run_finished_verified_acknowledged_join_by_operation_id() {
    let (mut m, id) = held();
    // The reading after the hold: pending, so it verifies Blocked.
    run(&mut m, Observation::Pass, 606);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 607);
    run(&mut m, pending_reading(1, 61), 608);
    run(&mut m, Observation::Acknowledged(ack(&id)), 609);
    let ids = |t| {
        entries(&m, t)
            .iter()
            .map(|e| e.operation_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(JournalEntryType::RunFinished), vec![Some(id.clone())]);
    assert_eq!(ids(JournalEntryType::Verified), vec![Some(id.clone())]);
    assert_eq!(
        ids(JournalEntryType::RunAcknowledged),
        vec![Some(id.clone())]
    );
    assert_eq!(ids(JournalEntryType::ApprovalAccepted), vec![Some(id)]);
    let rf = &entries(&m, JournalEntryType::RunFinished)[0];
    assert_eq!(rf.plan_uid.as_deref(), Some("plan-uid-1"));
    assert_eq!(rf.approval_uid.as_deref(), Some("approval-uid"));
    assert_eq!(rf.job_uid.as_deref(), Some("job-uid"));
    assert_eq!(rf.authorization, Some(Authorization::Approval));
    assert_eq!(rf.applied_count, Some(2));
    assert_eq!(
        entries(&m, JournalEntryType::Verified)[0].outcome,
        Some(JournalOutcome::Blocked)
    );
}

#[test]
fn partial_run_writes_one_run_finished() {
    let (mut m, _) = held();
    run(&mut m, Observation::Pass, 606);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 607);
    run(&mut m, pending_reading(1, 61), 608);
    assert_eq!(entries(&m, JournalEntryType::RunFinished).len(), 1);
    assert_eq!(
        entries(&m, JournalEntryType::RunFinished)[0].outcome,
        Some(JournalOutcome::Partial)
    );
}

#[test]
fn restored_hold_from_annotation_blocks_and_writes_run_finished() {
    let (m, _) = held();
    let copy = st(&m).unresolved_run.clone().expect("hold");
    let text = annotation_copy(&copy).expect("json");
    assert_eq!(restored_copy(&text), Some(copy.clone()));
    // A restore drops status; the annotation is back.
    let mut r = migration("configmap");
    set_annotation(&mut r, crate::api::annotations::UNRESOLVED_RUN, &text);
    let fx = run(
        &mut r,
        Observation::RestoredFromAnnotation(copy.clone()),
        1000,
    );
    assert_eq!(phase(&r), Some(P::Blocked));
    assert_eq!(st(&r).unresolved_run.as_ref(), Some(&copy));
    let rf = entries(&r, JournalEntryType::RunFinished);
    assert_eq!(rf.len(), 1);
    assert_eq!(rf[0].outcome, Some(JournalOutcome::Partial));
    assert_eq!(rf[0].time, at(6), "the time the hold recorded");
    assert_eq!(rf[0].operation_id, Some(copy.operation_id.clone()));
    assert!(
        fx.iter()
            .all(|e| !matches!(e, Effect::WriteUnresolvedAnnotation(_)))
    );
    // Seen again, nothing more is written.
    run(&mut r, Observation::RestoredFromAnnotation(copy), 1001);
    assert_eq!(entries(&r, JournalEntryType::RunFinished).len(), 1);
}

#[test]
fn leftover_annotation_copy_is_cleared_not_restored() {
    let (mut m, id) = held();
    let copy = st(&m).unresolved_run.clone().expect("hold");
    run(&mut m, Observation::Acknowledged(ack(&id)), 10);
    let fx = run(&mut m, Observation::RestoredFromAnnotation(copy), 11);
    assert_eq!(st(&m).unresolved_run, None);
    assert!(fx.contains(&Effect::ClearUnresolvedAnnotation));
    assert_eq!(entries(&m, JournalEntryType::RunFinished).len(), 1);
}

#[test]
fn unresolved_annotation_written_before_status_cleared_after() {
    let m = applying();
    let out = step(
        &m,
        &ended(RunEnd::Unknown { failure: None }, Some(1)),
        &at(6),
    );
    assert!(out.status.unresolved_run.is_some());
    assert!(out.before_status().all(Effect::precedes_status));
    assert_eq!(out.before_status().count(), 1);
    assert!(
        out.after_status()
            .all(|e| !matches!(e, Effect::WriteUnresolvedAnnotation(_)))
    );
    let mut m = m;
    m.status = Some(out.status);
    let id = st(&m)
        .unresolved_run
        .as_ref()
        .map(|u| u.operation_id.clone());
    let out = step(
        &m,
        &Observation::Acknowledged(ack(&id.unwrap_or_default())),
        &at(7),
    );
    assert_eq!(out.status.unresolved_run, None);
    assert_eq!(out.before_status().count(), 0);
    assert!(
        out.after_status()
            .any(|e| *e == Effect::ClearUnresolvedAnnotation)
    );
}

#[test]
fn republished_same_plan_writes_nothing() {
    let mut m = awaiting();
    run(&mut m, Observation::Pass, 603);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 604);
    run(&mut m, pending_reading(1, 50), 605);
    let fx = run(&mut m, Observation::PlanPublished(mplan(1)), 606);
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    assert_eq!(entries(&m, JournalEntryType::PlanPublished).len(), 1);
    assert!(fx.iter().all(|e| !matches!(e, Effect::RetirePlan { .. })));
}

#[test]
fn history_revisions_kept_newest_first_bounded() {
    let rows: Vec<RevisionRow> = (1..=40)
        .map(|v| RevisionRow {
            version: v,
            description: None,
            checksum: None,
            applied_at: Some(at(v)),
            execution_millis: None,
            dirty: false,
        })
        .collect();
    let mut m = reading_cm();
    run(
        &mut m,
        Observation::HistoryRead(HistoryReading {
            verdict: HistoryVerdict::NothingPending,
            history: MigrationHistory {
                revisions: rows,
                modified_versions: (0..100).collect(),
                ..MigrationHistory::default()
            },
        }),
        2,
    );
    let h = st(&m).history.as_ref().expect("history");
    assert_eq!(h.revisions.len(), REVISIONS_MAX);
    assert_eq!(h.revisions[0].version, 40, "newest first");
    assert_eq!(h.revisions[31].version, 9);
    assert_eq!(h.modified_versions.len(), VERSION_LIST_MAX);
    assert_eq!(h.observed_at, Some(at(2)));
}

#[test]
fn lease_continuity_lost_run_is_unknown() {
    let mut m = applying();
    run(&mut m, Observation::LeaseContinuityLost, 6);
    run(&mut m, ended(RunEnd::Applied, Some(1)), 7);
    assert_eq!(phase(&m), Some(P::Blocked));
    assert_eq!(
        st(&m).last_run.as_ref().map(|r| r.outcome),
        Some(RunOutcome::Unknown)
    );
}

#[test]
fn suspend_during_run_lets_it_finish() {
    let mut m = applying();
    m.spec.suspend = true;
    let fx = run(&mut m, Observation::SuspendChanged, 6);
    assert_eq!(claim_type(&m), Some(OperationType::Apply));
    assert!(!started(&fx, OperationType::Apply));
    run(&mut m, ended(RunEnd::Applied, Some(1)), 7);
    assert_eq!(phase(&m), Some(P::VerifyingHistory));
    let fx = run(&mut m, Observation::Pass, 8);
    assert_eq!(phase(&m), Some(P::Suspended));
    assert!(!started(&fx, OperationType::History), "no new Jobs");
    // Resumed, the first reading still verifies the run.
    m.spec.suspend = false;
    run(&mut m, Observation::SuspendChanged, 9);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 10);
    run(&mut m, clean_reading(1, 60), 11);
    assert_eq!(entries(&m, JournalEntryType::Verified).len(), 1);
}

// ----- read requests ---------------------------------------------------------

#[test]
fn read_request_in_insync_records_and_moves_next_reconciliation() {
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut m, Observation::ReadRequest, 60);
    assert_eq!(
        st(&m).last_read_request.as_deref(),
        Some("2026-01-01T00:01:00Z")
    );
    assert_eq!(st(&m).next_reconciliation_time, Some(at(60)));
    assert!(has_event(&fx, Reason::ReadRequested));
    let fx = run(&mut m, Observation::Pass, 61);
    assert!(fx.contains(&Effect::TakeSnapshot), "the next pass reads");
}

#[test]
fn read_request_in_planning_records_and_starts_read() {
    let mut m = reading_cm();
    apply_policy(&mut m, ApplyPolicy::Never);
    run(&mut m, pending_reading(1, 50), 2);
    run(&mut m, Observation::PlanPublished(mplan(1)), 3);
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut m, Observation::ReadRequest, 60);
    assert!(has_event(&fx, Reason::ReadRequested));
    let fx = run(&mut m, Observation::Pass, 60);
    assert!(fx.contains(&Effect::TakeSnapshot));
    assert!(
        st(&m).plan.is_some(),
        "the plan stays unless the reading retires it"
    );
}

#[test]
fn read_request_awaiting_approval_keeps_the_plan() {
    let mut m = awaiting();
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    run(&mut m, Observation::ReadRequest, 60);
    run(&mut m, Observation::Pass, 60);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 61);
    run(&mut m, pending_reading(1, 50), 62);
    run(&mut m, Observation::PlanPublished(mplan(1)), 63);
    assert_eq!(phase(&m), Some(P::AwaitingApproval));
    assert_eq!(
        st(&m).plan.as_ref().map(|p| p.uid.as_str()),
        Some("plan-uid-1")
    );
}

#[test]
fn read_request_waits_during_run_and_its_verification() {
    let mut m = applying();
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut m, Observation::ReadRequest, 6);
    assert!(!has_event(&fx, Reason::ReadRequested));
    run(&mut m, ended(RunEnd::Applied, Some(1)), 7);
    let fx = run(&mut m, Observation::ReadRequest, 7);
    assert_eq!(claim_type(&m), Some(OperationType::History));
    assert!(!has_event(&fx, Reason::ReadRequested));
    run(&mut m, Observation::ReadRequest, 8);
    assert_eq!(
        st(&m).last_read_request,
        None,
        "the proof read does not answer"
    );
    run(&mut m, clean_reading(1, 60), 9);
    let fx = run(&mut m, Observation::ReadRequest, 10);
    assert!(has_event(&fx, Reason::ReadRequested));
}

#[test]
fn read_request_under_way_does_not_answer() {
    let mut m = reading_cm();
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut m, Observation::ReadRequest, 2);
    assert!(!has_event(&fx, Reason::ReadRequested));
    assert_eq!(st(&m).last_read_request, None);
}

#[test]
fn read_request_waits_while_realm_blocked() {
    let mut m = migration("git");
    run(&mut m, Observation::Realm(RealmVerdict::Conflict), 0);
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut m, Observation::ReadRequest, 5);
    assert!(!has_event(&fx, Reason::ReadRequested));
    assert_eq!(st(&m).last_read_request, None);
}

#[test]
fn read_request_does_not_shorten_failed_retry() {
    let mut m = migration("git");
    run(
        &mut m,
        Observation::ConfigurationError {
            message: "x".into(),
        },
        0,
    );
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:00:05Z");
    let fx = run(&mut m, Observation::ReadRequest, 5);
    assert!(!started(&fx, OperationType::Resolve));
    assert_eq!(st(&m).last_read_request, None);
    let fx = run(&mut m, Observation::Pass, 30);
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn read_request_invalid_recorded_with_warning() {
    let mut m = reading_cm();
    run(&mut m, clean_reading(1, 50), 2);
    set_annotation(&mut m, READ_REQUESTED_AT, "now please");
    let fx = run(&mut m, Observation::ReadRequest, 5);
    assert!(has_event(&fx, Reason::ReadRequestInvalid));
    assert_eq!(st(&m).last_read_request.as_deref(), Some("now please"));
    assert!(!fx.contains(&Effect::TakeSnapshot), "starts nothing");
    let fx = run(&mut m, Observation::ReadRequest, 6);
    assert!(!has_event(&fx, Reason::ReadRequestInvalid), "reported once");
}

#[test]
fn failed_read_gives_way_when_interval_passed_for_git() {
    let mut m = migration("git");
    run(&mut m, Observation::Pass, 0);
    run(&mut m, Observation::SourceResolved(git_source(1)), 1);
    run(&mut m, failed("timeout"), 590);
    // The retry delay ends after spec.interval passed since the source read.
    let fx = run(&mut m, Observation::Pass, 620);
    assert_eq!(phase(&m), Some(P::Pending));
    assert!(has_event(&fx, Reason::ReadRestarted));
    let fx = run(&mut m, Observation::Pass, 621);
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn proof_read_stays_bound_to_what_the_run_ran_from() {
    let mut m = applying();
    let ran_from = claim(&m).and_then(|c| c.source.clone());
    run(&mut m, ended(RunEnd::Applied, Some(1)), 6);
    run(&mut m, Observation::Pass, 7);
    assert_eq!(claim(&m).and_then(|c| c.source.clone()), ran_from);
    // A new snapshot does not discard the read that proves the run.
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 8);
    assert_eq!(claim_type(&m), Some(OperationType::History));
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(!has_event(&fx, Reason::InputsChanged));
    run(&mut m, clean_reading(1, 60), 9);
    assert_eq!(entries(&m, JournalEntryType::Verified).len(), 1);
    // The snapshot is taken again once the proof ended: now it moves.
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 10);
    assert_eq!(phase(&m), Some(P::Reading));
    assert!(started(&fx, OperationType::History));
}

#[test]
fn apply_waiting_for_lease_asks_again() {
    let mut m = awaiting();
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        4,
    );
    let fx = run(&mut m, Observation::LeaseLost, 5);
    let retry = crate::api::realm::LEASE_RETRY.as_secs() as i64;
    assert!(fx.contains(&Effect::RequeueAt(at(5 + retry))));
    assert!(!started(&fx, OperationType::Apply));
    let ready = st(&m)
        .conditions
        .iter()
        .find(|c| c.type_ == C::Ready)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        ready.starts_with("the apply waits for its database's realm Lease"),
        "the Ready message says what it waits for: {ready:?}"
    );
    let fx = run(&mut m, Observation::Pass, 5 + retry);
    assert!(fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
    assert!(entries(&m, JournalEntryType::ApprovalAccepted).is_empty());
}

#[test]
fn failed_read_gives_way_at_once_when_source_changes() {
    let mut m = reading_cm();
    run(&mut m, failed("timeout"), 2);
    let fx = run(&mut m, Observation::SnapshotTaken(cm_source(2)), 3);
    assert_eq!(phase(&m), Some(P::Pending));
    assert_eq!(claim(&m), None);
    assert!(has_event(&fx, Reason::ReadRestarted));
}

#[test]
fn read_request_invalid_answered_inside_retry_delay_and_retry_goes_on() {
    let mut m = reading_cm();
    let id = claim(&m).map(|c| c.operation_id.clone());
    run(&mut m, failed("timeout"), 2);
    set_annotation(&mut m, READ_REQUESTED_AT, "soon");
    let fx = run(&mut m, Observation::ReadRequest, 5);
    assert!(has_event(&fx, Reason::ReadRequestInvalid));
    assert_eq!(st(&m).last_read_request.as_deref(), Some("soon"));
    let fx = run(&mut m, Observation::Pass, 32);
    assert!(started(&fx, OperationType::History));
    assert_eq!(claim(&m).map(|c| c.operation_id.clone()), id);
}

#[test]
fn unsupported_engine_waits_for_an_edit() {
    let mut m = migration("git");
    m.spec.target.engine = "Oracle".into();
    run(&mut m, Observation::EngineUnsupported, 0);
    m.metadata.generation = Some(2);
    run(&mut m, Observation::GenerationMoved, 5);
    assert_eq!(phase(&m), Some(P::Blocked), "still no supported engine");
    m.spec.target.engine = "PostgreSQL".into();
    m.metadata.generation = Some(3);
    let fx = run(&mut m, Observation::GenerationMoved, 6);
    assert_eq!(phase(&m), Some(P::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn pass_restores_hold_from_annotation_when_status_lost() {
    let (m, _) = held();
    let copy = st(&m).unresolved_run.clone().expect("hold");
    let mut r = migration("configmap");
    set_annotation(
        &mut r,
        crate::api::annotations::UNRESOLVED_RUN,
        &annotation_copy(&copy).expect("json"),
    );
    let fx = run(&mut r, Observation::Pass, 1000);
    assert_eq!(phase(&r), Some(P::Blocked), "no read starts first");
    assert!(!fx.contains(&Effect::TakeSnapshot));
    assert_eq!(st(&r).unresolved_run.as_ref(), Some(&copy));
    assert_eq!(entries(&r, JournalEntryType::RunFinished).len(), 1);
    // The next passes read at the interval and hold on.
    run(&mut r, Observation::Pass, 1001);
    assert_eq!(entries(&r, JournalEntryType::RunFinished).len(), 1);
    assert_eq!(phase(&r), Some(P::Blocked));
}

#[test]
fn hold_missing_its_annotation_copy_writes_it_again() {
    let (mut m, _) = held();
    let copy = st(&m).unresolved_run.clone().expect("hold");
    let out = step(&m, &Observation::Pass, &at(7));
    assert_eq!(
        out.before_status().collect::<Vec<_>>(),
        vec![&Effect::WriteUnresolvedAnnotation(copy.clone())]
    );
    set_annotation(
        &mut m,
        crate::api::annotations::UNRESOLVED_RUN,
        &annotation_copy(&copy).expect("json"),
    );
    let out = step(&m, &Observation::Pass, &at(8));
    assert_eq!(out.before_status().count(), 0, "the copy is in place");
}

#[test]
fn last_run_records_the_binding_it_ran_under() {
    let mut m = reading_cm();
    run(&mut m, Observation::ExecutionBindingChanged(binding(1)), 2);
    run(&mut m, Observation::Pass, 3);
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 4);
    run(&mut m, pending_reading(1, 50), 5);
    run(&mut m, Observation::PlanPublished(mplan(1)), 6);
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        7,
    );
    run(&mut m, lease(1), 8);
    assert_eq!(
        claim(&m).and_then(|c| c.execution_epoch.clone()),
        Some(epoch(1))
    );
    // A new binding while the run is under way does not rewrite its record.
    run(&mut m, Observation::ExecutionBindingChanged(binding(2)), 9);
    assert_eq!(claim_type(&m), Some(OperationType::Apply));
    run(&mut m, ended(RunEnd::Applied, Some(1)), 10);
    assert_eq!(
        st(&m)
            .last_run
            .as_ref()
            .and_then(|r| r.execution_binding.clone()),
        Some(binding(1))
    );
    // Sent again after the run, it takes effect.
    run(&mut m, Observation::ExecutionBindingChanged(binding(2)), 11);
    assert_eq!(st(&m).execution_binding, Some(binding(2)));
}

#[test]
fn read_request_in_blocked_unresolved_answers_and_reads() {
    let (mut m, _) = held();
    set_annotation(&mut m, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut m, Observation::ReadRequest, 60);
    assert!(has_event(&fx, Reason::ReadRequested));
    let fx = run(&mut m, Observation::Pass, 60);
    assert!(fx.contains(&Effect::TakeSnapshot));
    // A read never starts a mutating operation: the hold stays.
    assert!(st(&m).unresolved_run.is_some());
}

#[test]
fn idle_verification_policy_changed_goes_verifying() {
    let mut m = verifying_oci();
    run(&mut m, Observation::VerificationSatisfied(evidence(9)), 2);
    run(&mut m, pending_reading(1, 50), 3);
    run(&mut m, Observation::PlanPublished(mplan(1)), 4);
    // Waiting for approval, the plan retires: Pending, then a fresh read.
    let fx = run(&mut m, Observation::VerificationPolicyChanged, 5);
    assert_eq!(phase(&m), Some(P::Pending));
    assert!(fx.iter().any(|e| matches!(e, Effect::RetirePlan { .. })));
    // In sync, the artifact is verified again under the new policy.
    run(&mut m, Observation::Pass, 6);
    run(&mut m, Observation::SourceResolved(oci_source(1)), 7);
    run(&mut m, Observation::VerificationSatisfied(evidence(9)), 8);
    run(&mut m, clean_reading(1, 50), 9);
    let fx = run(&mut m, Observation::VerificationPolicyChanged, 10);
    assert_eq!(phase(&m), Some(P::Verifying));
    assert!(started(&fx, OperationType::Verify));
}

#[test]
fn approval_waits_while_a_configmap_read_starts() {
    let mut m = awaiting();
    m.metadata.generation = Some(2);
    let fx = run(&mut m, Observation::GenerationMoved, 10);
    assert!(fx.contains(&Effect::TakeSnapshot));
    let fx = run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        11,
    );
    assert!(fx.iter().all(|e| !matches!(e, Effect::AcquireLease { .. })));
    assert_eq!(claim(&m), None);
    // The reading republishes the same plan: now the approval counts.
    run(&mut m, Observation::SnapshotTaken(cm_source(1)), 12);
    run(&mut m, pending_reading(1, 50), 13);
    run(&mut m, Observation::PlanPublished(mplan(1)), 14);
    run(
        &mut m,
        Observation::ApprovalExists(approval_of(&mplan(1), "approval-uid")),
        15,
    );
    assert_eq!(phase(&m), Some(P::Applying));
}

#[test]
fn module_doc_names_only_existing_tests() {
    let named = doc_names_only_existing_tests(
        include_str!("migration.rs"),
        include_str!("migration_tests.rs"),
    );
    assert!(named >= 60, "the tables name {named} tests");
}
