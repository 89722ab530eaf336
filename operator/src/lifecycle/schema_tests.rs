//! One named test per arrow of the seed's three schema diagrams and per
//! branch of "Where the path turns"; the module doc of `schema.rs` maps each
//! arrow to its test.

use serde_json::json;

use super::*;
use crate::api::annotations::READ_REQUESTED_AT;
use crate::lifecycle::test_support::{
    self as support, approval, at, binding, digest, doc_names_only_existing_tests, epoch, evidence,
    git_source, machine_drivers, set_annotation, true_reason,
};

// ----- fixtures -------------------------------------------------------------

fn schema(kind: &str) -> PtahSchema {
    support::resource("PtahSchema", "schema", kind)
}

fn cm_source(n: u8) -> SourceStatus {
    support::cm_source("schema", n)
}

fn oci_source(n: u8) -> SourceStatus {
    support::oci_source("schema", n)
}

fn target(identity: u8, findings: i64) -> TargetStatus {
    TargetStatus {
        engine: Some("postgresql".into()),
        coordination_digest: Some(digest(150)),
        identity_digest: Some(digest(identity)),
        drift_finding_count: Some(findings),
        ..TargetStatus::default()
    }
}

fn plan(n: u8) -> SchemaPlanSummary {
    SchemaPlanSummary {
        name: format!("orders-plan-{n}"),
        uid: format!("plan-uid-{n}"),
        fingerprint: digest(100 + n),
        content_digest: Some(digest(120 + n)),
        created_at: None,
        statement_count: Some(2),
        destructive: false,
        privilege_changes: Vec::new(),
        approval_required: false,
        approval: None,
    }
}

fn destructive(n: u8) -> SchemaPlanSummary {
    SchemaPlanSummary {
        destructive: true,
        ..plan(n)
    }
}

fn changes(p: SchemaPlanSummary) -> Observation {
    Observation::Planned(PlanVerdict::Changes {
        plan: Box::new(p),
        protected_table: None,
        destructive_statement: None,
        target_identity_digest: Some(digest(1)),
    })
}

fn no_change() -> Observation {
    Observation::Planned(PlanVerdict::NoChange {
        target_identity_digest: Some(digest(1)),
    })
}

fn approval_of(p: &SchemaPlanSummary) -> ApprovalSeen {
    approval("approval-uid", &p.uid, &p.fingerprint)
}

machine_drivers!(PtahSchema, PtahSchemaStatus, SchemaPhase);

/// The first journal entry of a type: what most tests check an outcome on.
fn entry(s: &PtahSchema, type_: JournalEntryType) -> Option<&JournalEntry> {
    st(s).journal.iter().find(|e| e.type_ == type_)
}

fn journal_types(s: &PtahSchema) -> Vec<JournalEntryType> {
    st(s).journal.iter().map(|e| e.type_).collect()
}

fn apply_always(s: &mut PtahSchema) {
    s.spec.policy.apply = ApplyPolicy::Always;
}

// ----- drivers: the machine itself walks to each starting phase -----------

/// ConfigMap source, Observing at second 1.
fn observing() -> PtahSchema {
    let mut s = schema("configmap");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 1);
    s
}

/// OCI source resolved at second 1, Verifying.
fn verifying_oci() -> PtahSchema {
    let mut s = schema("oci");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(oci_source(1)), 1);
    s
}

/// OCI source resolved and verified at second 1, Observing.
fn observing_verified_oci() -> PtahSchema {
    let mut s = verifying_oci();
    run(&mut s, Observation::VerificationSatisfied(evidence(9)), 1);
    s
}

/// Planning with its Lease, Job dispatched, at second 3.
fn planning_from(mut s: PtahSchema) -> PtahSchema {
    run(&mut s, Observation::DriftObserved(target(1, 3)), 2);
    run(&mut s, lease(1), 3);
    s
}

fn planning() -> PtahSchema {
    planning_from(observing())
}

/// The verdict on plan 1 at second 4.
fn verdict(mut s: PtahSchema, p: SchemaPlanSummary) -> PtahSchema {
    s = planning_from(s);
    run(&mut s, changes(p), 4);
    s
}

fn ready_to_apply() -> PtahSchema {
    let mut s = observing();
    apply_always(&mut s);
    verdict(s, plan(1))
}

fn awaiting_approval() -> PtahSchema {
    verdict(observing(), plan(1))
}

/// Plan 1 from `s`, its Apply claimed under approval, not dispatched yet
/// (second 6).
fn approved(s: PtahSchema) -> PtahSchema {
    let mut s = verdict(s, plan(1));
    run(
        &mut s,
        Observation::ApprovalExists(approval_of(&plan(1))),
        6,
    );
    s
}

fn applying_undispatched() -> PtahSchema {
    approved(observing())
}

/// An Apply Job dispatched (second 7).
fn applying() -> PtahSchema {
    let mut s = applying_undispatched();
    run(&mut s, lease(2), 7);
    s
}

/// The proof's Observe dispatched after an Apply that reported `success`
/// (second 10).
fn proving(success: bool) -> PtahSchema {
    let mut s = applying();
    run(
        &mut s,
        Observation::ApplyEnded {
            reported_success: success,
            job_uid: Some("job-uid".into()),
        },
        10,
    );
    s
}

/// The proof's Plan dispatched (second 11).
fn proving_plan(success: bool) -> PtahSchema {
    let mut s = proving(success);
    run(&mut s, Observation::DriftObserved(target(1, 1)), 11);
    s
}

fn in_sync() -> PtahSchema {
    let mut s = planning();
    run(&mut s, no_change(), 4);
    s
}

// ----- "From the source to a plan's verdict" --------------------------------

#[test]
fn new_oci_source_goes_resolving() {
    let mut s = schema("oci");
    let fx = run(&mut s, Observation::Pass, 0);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    assert!(
        claim(&s).is_some_and(|c| c.dispatch_started),
        "claim before Job"
    );
}

#[test]
fn new_git_source_goes_resolving() {
    let mut s = schema("git");
    let fx = run(&mut s, Observation::Pass, 0);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn configmap_source_skips_resolving_to_observing() {
    let mut s = schema("configmap");
    let fx = run(&mut s, Observation::Pass, 0);
    assert!(fx.contains(&Effect::TakeSnapshot));
    assert_eq!(
        phase(&s),
        None,
        "a new resource has no phase until its first read starts"
    );
    let fx = run(&mut s, Observation::SnapshotTaken(cm_source(1)), 1);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Observing),
        "Resolving never shows"
    );
    assert!(started(&fx, OperationType::Observe));
    assert!(!started(&fx, OperationType::Resolve));
    assert_eq!(
        conditions::get(&st(&s).conditions, C::ArtifactResolved).map(|c| c.reason),
        Some(Reason::SnapshotTaken)
    );
}

#[test]
fn resolving_oci_digest_pinned_goes_verifying() {
    let mut s = schema("oci");
    run(&mut s, Observation::Pass, 0);
    let fx = run(&mut s, Observation::SourceResolved(oci_source(1)), 1);
    assert_eq!(phase(&s), Some(SchemaPhase::Verifying));
    assert!(started(&fx, OperationType::Verify));
}

#[test]
fn new_flux_source_goes_resolving() {
    let mut s = schema("flux-git");
    let fx = run(&mut s, Observation::Pass, 0);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn resolving_flux_artifact_snapshotted_goes_observing() {
    let mut s = schema("flux-git");
    run(&mut s, Observation::Pass, 0);
    let fx = run(
        &mut s,
        Observation::SourceResolved(support::flux_source(1, false)),
        1,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(started(&fx, OperationType::Observe));
    assert_eq!(
        conditions::get(&st(&s).conditions, C::ArtifactResolved).map(|c| c.reason),
        Some(Reason::SnapshotTaken)
    );
    let bound = claim(&s).and_then(|c| c.source.clone()).expect("bound");
    assert_eq!(bound.snapshot_name.as_deref(), Some("ptah-src-1"));
    assert_eq!(bound.flux_object_uid.as_deref(), Some("flux-uid"));
    assert!(bound.flux_revision.is_some());
}

#[test]
fn resolving_flux_oci_repository_under_a_policy_goes_verifying() {
    let mut s = schema("flux-oci");
    run(&mut s, Observation::Pass, 0);
    let fx = run(
        &mut s,
        Observation::SourceResolved(support::flux_source(1, true)),
        1,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Verifying));
    assert!(started(&fx, OperationType::Verify));
    let bound = claim(&s).and_then(|c| c.source.clone()).expect("bound");
    assert_eq!(
        bound.resolved_reference.as_deref(),
        Some(format!("oci://r.example/orders@{}", digest(1)).as_str())
    );
}

#[test]
fn flux_new_artifact_retires_the_waiting_plan_and_resolves_again() {
    let mut s = schema("flux-git");
    run(&mut s, Observation::Pass, 0);
    run(
        &mut s,
        Observation::SourceResolved(support::flux_source(1, false)),
        1,
    );
    let mut s = verdict(s, plan(1));
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    let fx = run(&mut s, Observation::SourceChanged, 5);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    assert!(
        st(&s).plan.is_none(),
        "the plan bound the old revision: it retires"
    );
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::RetirePlan {
            reason: Reason::PlanNoLongerCurrent,
            ..
        }
    )));
}

#[test]
fn resolving_git_commit_goes_observing() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    let fx = run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(started(&fx, OperationType::Observe));
    assert_eq!(
        conditions::get(&st(&s).conditions, C::ArtifactResolved).map(|c| c.reason),
        Some(Reason::CommitResolved)
    );
}

#[test]
fn verifying_policy_satisfied_goes_observing() {
    let mut s = verifying_oci();
    let fx = run(&mut s, Observation::VerificationSatisfied(evidence(9)), 2);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(started(&fx, OperationType::Observe));
    assert!(conditions::is_true(&st(&s).conditions, C::ArtifactVerified));
    assert_eq!(
        claim(&s)
            .and_then(|c| c.source.as_ref())
            .and_then(|b| b.verification_policy_digest.clone()),
        Some(digest(9))
    );
}

#[test]
fn verifying_policy_refused_goes_blocked() {
    let mut s = verifying_oci();
    let fx = run(
        &mut s,
        Observation::VerificationRefused {
            message: "unsigned".into(),
        },
        2,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::PolicyRefused));
    assert!(claim(&s).is_none());
    assert!(
        fx.contains(&Effect::RequeueAt(at(602))),
        "keeps reading at its interval"
    );
}

#[test]
fn observing_drift_read_goes_planning() {
    let mut s = observing();
    let fx = run(&mut s, Observation::DriftObserved(target(1, 3)), 2);
    assert_eq!(phase(&s), Some(SchemaPhase::Planning));
    assert_eq!(claim_type(&s), Some(OperationType::Plan));
    assert!(
        matches!(fx[..], [Effect::AcquireLease { .. }, ..]),
        "Plan takes the Lease first"
    );
    assert!(
        fx[0].needs_stored_status(),
        "only once its claim is stored: a claim that lost the write race takes no Lease"
    );
    assert!(!started(&fx, OperationType::Plan));
    assert!(conditions::is_true(&st(&s).conditions, C::DriftDetected));
    let fx = run(&mut s, lease(1), 3);
    assert!(started(&fx, OperationType::Plan));
    assert_eq!(
        claim(&s).and_then(|c| c.lease_epoch.clone()),
        Some(epoch(1))
    );
}

#[test]
fn a_plan_waiting_for_its_lease_says_so_and_asks_again() {
    let mut s = observing();
    run(&mut s, Observation::DriftObserved(target(1, 3)), 2);
    let fx = run(&mut s, Observation::LeaseLost, 3);
    let retry = crate::api::realm::LEASE_RETRY.as_secs() as i64;
    assert!(fx.contains(&Effect::RequeueAt(at(3 + retry))));
    assert!(!started(&fx, OperationType::Plan));
    assert_eq!(phase(&s), Some(SchemaPhase::Planning));
    let ready = conditions::get(&st(&s).conditions, C::Ready).expect("Ready");
    assert!(
        ready
            .message
            .starts_with("the plan waits for its database's realm Lease"),
        "{:?}",
        ready.message
    );
}

#[test]
fn planning_no_change_goes_in_sync() {
    let mut s = planning();
    let fx = run(&mut s, no_change(), 4);
    assert_eq!(phase(&s), Some(SchemaPhase::InSync));
    assert!(claim(&s).is_none());
    assert!(conditions::is_true(&st(&s).conditions, C::Ready));
    assert!(conditions::is_true(&st(&s).conditions, C::InSync));
    assert!(fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
    assert!(
        st(&s).journal.is_empty(),
        "a cycle that finds nothing to do writes no entry"
    );
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::StartJob { .. } | Effect::SpendApproval { .. }))
    );
}

#[test]
fn planning_changes_under_always_goes_ready_to_apply() {
    let s = ready_to_apply();
    assert_eq!(phase(&s), Some(SchemaPhase::ReadyToApply));
    assert!(!conditions::is_true(
        &st(&s).conditions,
        C::ApprovalRequired
    ));
    assert_eq!(journal_types(&s), vec![JournalEntryType::PlanPublished]);
    assert_eq!(st(&s).journal[0].approval_required, Some(false));
}

#[test]
fn awaiting_approval_reads_in_progress_to_kstatus_naming_the_plan() {
    let s = awaiting_approval();
    let conds = &st(&s).conditions;
    assert!(
        conditions::is_true(conds, C::Reconciling),
        "a Flux health check keeps waiting"
    );
    assert!(
        !conditions::is_true(conds, C::Stalled),
        "never read as failed"
    );
    assert!(!conditions::is_true(conds, C::Ready));
    let ready = conditions::get(conds, C::Ready).expect("Ready");
    let plan = st(&s).plan.as_ref().expect("plan");
    assert_eq!(ready.reason, Reason::AwaitingApproval);
    assert_eq!(
        ready.message,
        format!("plan {} waits for an approval", plan.name)
    );
}

#[test]
fn planning_changes_on_approval_goes_awaiting_approval() {
    let s = awaiting_approval();
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    assert!(conditions::is_true(&st(&s).conditions, C::ApprovalRequired));
    assert_eq!(st(&s).journal[0].approval_required, Some(true));
}

#[test]
fn planning_privilege_change_under_always_goes_awaiting_approval() {
    let mut s = observing();
    apply_always(&mut s);
    let p = SchemaPlanSummary {
        privilege_changes: vec![serde_json::from_value(json!("Grant")).unwrap_or_else(|_| {
            serde_json::from_value(json!("GRANT")).expect("a privilege change kind")
        })],
        ..plan(1)
    };
    let s = verdict(s, p);
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
}

#[test]
fn planning_destructive_allowed_under_always_goes_awaiting_approval() {
    let mut s = observing();
    apply_always(&mut s);
    s.spec.policy.allow_destructive = true;
    let s = verdict(s, destructive(1));
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
}

#[test]
fn planning_protected_table_goes_blocked() {
    let mut s = planning();
    run(
        &mut s,
        Observation::Planned(PlanVerdict::Changes {
            plan: Box::new(plan(1)),
            protected_table: Some("public.users".into()),
            destructive_statement: None,
            target_identity_digest: None,
        }),
        4,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::ProtectedTable));
    let message = stalled_message(&s);
    for part in [&plan(1).name, "public.users", "spec.policy.protectedTables"] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn planning_destructive_disallowed_goes_blocked() {
    let s = verdict(observing(), destructive(1));
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::DestructiveChangesDisabled));
    let message = stalled_message(&s);
    assert!(
        message.contains("spec.policy.allowDestructive"),
        "{message}"
    );

    // The message quotes the statement, on one line.
    let mut s = planning_from(observing());
    let statement = "ALTER TABLE public.orders\n  DROP COLUMN note";
    let o = Observation::Planned(PlanVerdict::Changes {
        plan: Box::new(destructive(1)),
        protected_table: None,
        destructive_statement: Some(statement.into()),
        target_identity_digest: Some(digest(1)),
    });
    run(&mut s, o, 4);
    let message = stalled_message(&s);
    for part in [
        &destructive(1).name,
        "ALTER TABLE public.orders DROP COLUMN note",
    ] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn planning_apply_never_goes_blocked() {
    let mut s = observing();
    s.spec.policy.apply = ApplyPolicy::Never;
    let fx_s = verdict(s, plan(1));
    assert_eq!(phase(&fx_s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&fx_s), Some(Reason::ApplyDisabled));
    let message = stalled_message(&fx_s);
    for part in [
        plan(1).name.as_str(),
        "spec.policy.apply is Never",
        "OnApproval",
    ] {
        assert!(message.contains(part), "{message}");
    }
    assert!(
        st(&fx_s).plan.is_some(),
        "Never publishes plans and applies none"
    );
}

#[test]
fn planning_target_moved_goes_observing() {
    let mut s = planning();
    let fx = run(&mut s, Observation::Planned(PlanVerdict::TargetMoved), 4);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(started(&fx, OperationType::Observe));
    assert!(fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
}

#[test]
fn planning_lock_lost_goes_observing() {
    let mut s = planning();
    let fx = run(&mut s, Observation::Planned(PlanVerdict::LockLost), 4);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(started(&fx, OperationType::Observe));
}

#[test]
fn lease_continuity_lost_discards_plan_result() {
    let mut s = planning();
    run(&mut s, Observation::LeaseContinuityLost, 4);
    assert!(claim(&s).is_some_and(|c| c.lease_continuity_lost));
    let fx = run(&mut s, no_change(), 5);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Observing),
        "the result is discarded, not read"
    );
    assert!(started(&fx, OperationType::Observe));
}

// ----- "From a plan to the proof that it worked" ----------------------------

#[test]
fn ready_to_apply_gates_hold_goes_applying() {
    let mut s = ready_to_apply();
    let fx = run(&mut s, Observation::Pass, 5);
    assert_eq!(phase(&s), Some(SchemaPhase::Applying));
    assert_eq!(claim_type(&s), Some(OperationType::Apply));
    assert_eq!(
        claim(&s).and_then(|c| c.authorization),
        Some(Authorization::Policy)
    );
    assert!(matches!(fx[..], [Effect::AcquireLease { .. }, ..]));
    let fx = run(&mut s, lease(2), 6);
    assert!(started(&fx, OperationType::Apply));
    assert!(claim(&s).is_some_and(|c| c.dispatch_started));
    assert!(!fx.iter().any(|e| matches!(e, Effect::SpendApproval { .. })));
}

#[test]
fn ready_to_apply_interval_ends_goes_resolving() {
    let mut s = schema("git");
    apply_always(&mut s);
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    let mut s = verdict(s, plan(1));
    assert_eq!(phase(&s), Some(SchemaPhase::ReadyToApply));
    let fx = run(&mut s, Observation::Pass, 604);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    assert!(
        st(&s).plan.is_some(),
        "the plan waits for the Resolve's verdict"
    );
}

#[test]
fn ready_to_apply_plan_stale_goes_observing() {
    let mut s = ready_to_apply();
    let fx = run(&mut s, Observation::SnapshotTaken(cm_source(2)), 5);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(st(&s).plan.is_none());
    assert!(fx.iter().any(|e| matches!(e, Effect::RetirePlan { .. })));
}

#[test]
fn configmap_edit_of_unselected_key_keeps_plan() {
    let mut s = awaiting_approval();
    let fx = run(&mut s, Observation::SnapshotTaken(cm_source(1)), 5);
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    assert!(st(&s).plan.is_some());
    assert!(!fx.iter().any(|e| matches!(e, Effect::StartJob { .. })));
}

#[test]
fn awaiting_approval_goes_straight_to_applying() {
    let mut s = awaiting_approval();
    run(
        &mut s,
        Observation::ApprovalExists(approval_of(&plan(1))),
        6,
    );
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Applying),
        "never through ReadyToApply"
    );
    assert_eq!(
        claim(&s).and_then(|c| c.approval_uid.clone()),
        Some("approval-uid".into())
    );
    let fx = run(&mut s, lease(2), 7);
    assert!(started(&fx, OperationType::Apply));
    assert!(fx.contains(&Effect::SpendApproval {
        name: "approve-orders".into(),
        uid: "approval-uid".into()
    }));
    let accepted = entry(&s, JournalEntryType::ApprovalAccepted);
    assert!(
        accepted.is_some_and(|e| e.approval_uid.as_deref() == Some("approval-uid")
            && e.approver.as_ref().is_some_and(|a| a.username == "alice"))
    );
}

#[test]
fn a_spent_approval_of_the_plan_published_again_authorizes_nothing() {
    let mut s = awaiting_approval();
    run(
        &mut s,
        Observation::ApprovalExists(approval_of(&plan(1))),
        6,
    );
    run(&mut s, lease(2), 7);
    // The Apply's outcome is unknown and its proof finds the same changes:
    // the same plan is published again and awaits a new approval.
    let mut again = awaiting_approval();
    again.status.as_mut().expect("status").journal = st(&s).journal.clone();
    let fx = run(
        &mut again,
        Observation::ApprovalExists(approval_of(&plan(1))),
        8,
    );
    assert_eq!(phase(&again), Some(SchemaPhase::AwaitingApproval));
    assert!(claim(&again).is_none());
    assert!(!fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
}

#[test]
fn approval_of_a_replaced_plan_authorizes_nothing() {
    let mut s = awaiting_approval();
    let fx = run(
        &mut s,
        Observation::ApprovalExists(approval_of(&plan(9))),
        6,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    assert!(claim(&s).is_none());
    assert!(!fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
}

#[test]
fn awaiting_approval_interval_ends_goes_resolving() {
    let mut s = verdict(observing_verified_oci(), plan(1));
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    run(&mut s, Observation::Pass, 604);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(
        st(&s).plan.is_some(),
        "kept unless the new reading retires it"
    );
}

#[test]
fn awaiting_approval_plan_stale_goes_observing() {
    let mut s = awaiting_approval();
    let fx = run(&mut s, Observation::SnapshotTaken(cm_source(2)), 5);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(
        has_event(&fx, Reason::PlanStale),
        "a plan a person could approve was replaced"
    );
    // The next plan records what it replaced; the old approval does not carry over.
    let s2 = {
        let mut s2 = planning_from(s);
        run(&mut s2, changes(plan(2)), 6);
        s2
    };
    let published = st(&s2)
        .journal
        .iter()
        .filter(|e| e.type_ == JournalEntryType::PlanPublished)
        .count();
    assert_eq!(published, 2);
    assert_eq!(
        st(&s2).journal[1].replaced.as_deref(),
        Some("orders-plan-1"),
        "the record of what the PlanStale Warning reported"
    );
    assert!(st(&s2).plan.as_ref().is_some_and(|p| p.approval.is_none()));
}

#[test]
fn replaced_plan_is_named_by_the_new_plan() {
    let mut s = awaiting_approval();
    // The interval's refresh finds a new plan for the same source.
    run(&mut s, Observation::Pass, 604);
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 605);
    let mut s = planning_from(s);
    let fx = run(&mut s, changes(plan(2)), 606);
    assert!(has_event(&fx, Reason::PlanStale));
    let last = st(&s).journal.last().expect("entry");
    assert_eq!(last.replaced.as_deref(), Some("orders-plan-1"));
}

#[test]
fn same_plan_republished_writes_nothing() {
    let mut s = awaiting_approval();
    run(&mut s, Observation::Pass, 604);
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 605);
    let mut s = planning_from(s);
    let fx = run(&mut s, changes(plan(1)), 606);
    assert_eq!(journal_types(&s), vec![JournalEntryType::PlanPublished]);
    assert!(!fx.iter().any(|e| matches!(e, Effect::RetirePlan { .. })));
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
}

#[test]
fn a_plan_the_journal_holds_published_again_writes_no_second_entry() {
    let mut s = awaiting_approval();
    // Status no longer names the plan (it ran, or gave way), and the next
    // reading plans exactly the same change again.
    s.status.as_mut().expect("status").plan = None;
    run(&mut s, Observation::Pass, 604);
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 605);
    let mut s = planning_from(s);
    run(&mut s, changes(plan(1)), 606);
    assert_eq!(journal_types(&s), vec![JournalEntryType::PlanPublished]);
    assert_eq!(
        st(&s).plan.as_ref().map(|p| p.uid.as_str()),
        Some("plan-uid-1")
    );
}

#[test]
fn apply_job_succeeded_goes_verifying_convergence() {
    let s = proving(true);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert_eq!(claim_type(&s), Some(OperationType::Observe));
    let p = st(&s).pending_observation.as_ref().expect("proof owed");
    assert_eq!(p.outcome, ApplyOutcome::ApplySucceeded);
    assert_eq!(
        p.lease_epoch,
        Some(epoch(2)),
        "the proof keeps the Apply's Lease"
    );
    assert_eq!(
        claim(&s).and_then(|c| c.lease_epoch.clone()),
        Some(epoch(2))
    );
    let finished = entry(&s, JournalEntryType::ApplyFinished);
    assert_eq!(
        finished.and_then(|e| e.outcome),
        Some(JournalOutcome::Succeeded)
    );
}

#[test]
fn apply_job_error_goes_verifying_convergence() {
    let s = proving(false);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::VerifyingConvergence),
        "never Failed"
    );
    let p = st(&s).pending_observation.as_ref().expect("proof owed");
    assert_eq!(p.outcome, ApplyOutcome::OutcomeUnknown);
    let finished = entry(&s, JournalEntryType::ApplyFinished);
    assert_eq!(
        finished.and_then(|e| e.reason),
        Some(Reason::ApplyOutcomeUnknown)
    );
}

#[test]
fn apply_job_lost_goes_verifying_convergence() {
    let mut s = applying();
    let fx = run(&mut s, Observation::JobLost, 10);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert!(!started(&fx, OperationType::Apply), "never replayed");
    assert!(started(&fx, OperationType::Observe));
    assert_eq!(
        st(&s).pending_observation.as_ref().map(|p| p.outcome),
        Some(ApplyOutcome::OutcomeUnknown)
    );
}

#[test]
fn apply_job_failure_report_goes_verifying_convergence_never_failed() {
    let mut s = applying();
    let fx = run(&mut s, failed("statement failed"), 10);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert!(!started(&fx, OperationType::Apply));
    assert_eq!(
        st(&s).pending_observation.as_ref().map(|p| p.outcome),
        Some(ApplyOutcome::OutcomeUnknown)
    );
}

#[test]
fn ready_to_apply_plan_is_not_replaced_in_the_journal() {
    let mut s = ready_to_apply();
    run(&mut s, Observation::SnapshotTaken(cm_source(2)), 5);
    let mut s = planning_from(s);
    let fx = run(&mut s, changes(plan(2)), 6);
    assert!(
        !has_event(&fx, Reason::PlanStale),
        "nobody could approve it"
    );
    assert_eq!(st(&s).journal.last().and_then(|e| e.replaced.clone()), None);
}

#[test]
fn dispatched_apply_is_never_dispatched_again() {
    let mut s = applying();
    for (t, o) in [
        (8, Observation::Pass),
        (9, lease(3)),
        (10, Observation::GenerationMoved),
        (11, Observation::SnapshotTaken(cm_source(2))),
        (12, Observation::ApprovalAbsent),
    ] {
        let fx = run(&mut s, o, t);
        assert!(!started(&fx, OperationType::Apply));
        assert_eq!(phase(&s), Some(SchemaPhase::Applying));
        assert!(claim(&s).is_some_and(|c| c.dispatch_started));
    }
}

#[test]
fn apply_withdrawn_source_moved_goes_observing() {
    let mut s = applying_undispatched();
    let fx = run(&mut s, Observation::SnapshotTaken(cm_source(2)), 7);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
    assert!(st(&s).plan.is_none());
    assert!(
        !journal_types(&s).contains(&JournalEntryType::ApplyFinished),
        "withdrawn writes nothing"
    );
    assert!(!fx.iter().any(|e| matches!(e, Effect::SpendApproval { .. })));
}

#[test]
fn apply_withdrawn_verification_policy_goes_verifying() {
    let mut s = approved(observing_verified_oci());
    let fx = run(&mut s, Observation::VerificationPolicyChanged, 7);
    assert_eq!(phase(&s), Some(SchemaPhase::Verifying));
    assert!(started(&fx, OperationType::Verify));
}

#[test]
fn apply_withdrawn_approval_gone_goes_awaiting_approval() {
    let mut s = applying_undispatched();
    run(&mut s, Observation::ApprovalAbsent, 7);
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    assert!(claim(&s).is_none());
    assert!(
        st(&s).plan.as_ref().is_some_and(|p| p.approval.is_none()),
        "a withdrawn claim spent no approval"
    );
    assert!(!journal_types(&s).contains(&JournalEntryType::ApprovalAccepted));
}

#[test]
fn apply_withdrawn_execution_binding_goes_pending() {
    let mut s = applying_undispatched();
    let binding = binding(7);
    run(&mut s, Observation::ExecutionBindingChanged(binding), 7);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(claim(&s).is_none());
    assert!(
        st(&s).plan.is_none(),
        "a plan bound to the old epoch authorizes nothing"
    );
}

#[test]
fn apply_withdrawn_suspend_goes_suspended() {
    let mut s = applying_undispatched();
    s.spec.suspend = true;
    run(&mut s, Observation::SuspendChanged, 7);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    assert!(claim(&s).is_none());
}

#[test]
fn apply_job_unbuildable_goes_failed_claim_tries_again() {
    let mut s = applying();
    run(&mut s, pod_refused("restricted"), 8);
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
    let c = claim(&s).expect("the claim stays");
    assert_eq!(c.type_, OperationType::Apply);
    assert!(!c.dispatch_started);
    let fx = run(&mut s, Observation::Pass, 20);
    assert!(
        !started(&fx, OperationType::Apply),
        "not before failureRetryInterval"
    );
    let fx = run(&mut s, Observation::Pass, 38);
    assert!(started(&fx, OperationType::Apply));
    assert_eq!(claim(&s).map(|c| c.attempt), Some(2));
}

#[test]
fn proof_no_change_goes_in_sync() {
    let mut s = proving_plan(true);
    assert!(
        claim(&s)
            .is_some_and(|c| c.type_ == OperationType::Plan && c.lease_epoch == Some(epoch(2)))
    );
    let fx = run(&mut s, no_change(), 12);
    assert_eq!(phase(&s), Some(SchemaPhase::InSync));
    assert_eq!(
        conditions::get(&st(&s).conditions, C::InSync).map(|c| c.reason),
        Some(Reason::ScopedConverged)
    );
    assert!(st(&s).pending_observation.is_none());
    assert!(
        st(&s)
            .applied
            .as_ref()
            .is_some_and(|a| a.plan_uid == "plan-uid-1")
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::ReleaseLease(r) if r.lease_epoch == epoch(2)))
    );
    assert_eq!(
        journal_types(&s),
        vec![
            JournalEntryType::PlanPublished,
            JournalEntryType::ApprovalAccepted,
            JournalEntryType::ApplyFinished,
            JournalEntryType::Verified
        ]
    );
}

#[test]
fn proof_after_unknown_outcome_goes_in_sync_converged_after_unknown() {
    let mut s = proving_plan(false);
    run(&mut s, no_change(), 12);
    assert_eq!(phase(&s), Some(SchemaPhase::InSync));
    assert_eq!(
        conditions::get(&st(&s).conditions, C::InSync).map(|c| c.reason),
        Some(Reason::ConvergedAfterUnknownOutcome)
    );
}

#[test]
fn proof_changes_remain_goes_ready_to_apply() {
    let mut s = proving_plan(true);
    apply_always(&mut s);
    run(&mut s, changes(plan(2)), 12);
    assert_eq!(phase(&s), Some(SchemaPhase::ReadyToApply));
    let verified = entry(&s, JournalEntryType::Verified);
    assert_eq!(
        verified.and_then(|e| e.outcome),
        Some(JournalOutcome::DriftRemains)
    );
}

#[test]
fn proof_changes_remain_goes_awaiting_approval() {
    let mut s = proving_plan(true);
    run(&mut s, changes(plan(2)), 12);
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    assert_eq!(
        st(&s).plan.as_ref().map(|p| p.uid.as_str()),
        Some("plan-uid-2")
    );
    assert!(
        st(&s).plan.as_ref().is_some_and(|p| p.approval.is_none()),
        "a new approval"
    );
}

#[test]
fn proof_changes_remain_goes_blocked() {
    let mut s = proving_plan(true);
    run(&mut s, changes(destructive(2)), 12);
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
}

#[test]
fn proof_superseded_by_generation_goes_pending() {
    let mut s = proving(true);
    s.metadata.generation = Some(2);
    let fx = run(&mut s, Observation::GenerationMoved, 11);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(st(&s).pending_observation.is_none());
    assert!(fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
    let verified = entry(&s, JournalEntryType::Verified);
    assert_eq!(
        verified.and_then(|e| e.outcome),
        Some(JournalOutcome::Superseded)
    );
}

#[test]
fn proof_superseded_by_execution_binding_goes_pending() {
    let mut s = proving(true);
    let binding = binding(7);
    run(&mut s, Observation::ExecutionBindingChanged(binding), 11);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(st(&s).pending_observation.is_none());
}

#[test]
fn proof_superseded_by_policy_goes_verifying() {
    let mut s = approved(observing_verified_oci());
    run(&mut s, lease(2), 7);
    run(
        &mut s,
        Observation::ApplyEnded {
            reported_success: true,
            job_uid: None,
        },
        10,
    );
    let fx = run(&mut s, Observation::VerificationPolicyChanged, 11);
    assert_eq!(phase(&s), Some(SchemaPhase::Verifying));
    assert!(started(&fx, OperationType::Verify));
    assert!(st(&s).pending_observation.is_none());
}

#[test]
fn proof_reads_other_target_blocks_with_claim_kept() {
    let mut s = proving(true);
    let fx = run(&mut s, Observation::DriftObserved(target(2, 0)), 11);
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::TargetIdentityChanged));
    let c = claim(&s).expect("claim stays");
    assert_eq!(c.lease_epoch, Some(epoch(2)), "Lease stays");
    assert!(st(&s).pending_observation.is_some());
    assert!(!fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
}

#[test]
fn insync_interval_ends_goes_resolving() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    let mut s = planning_from(s);
    let fx = run(&mut s, no_change(), 4);
    assert!(fx.contains(&Effect::RequeueAt(at(604))));
    let fx = run(&mut s, Observation::Pass, 300);
    assert!(fx.iter().all(|e| !matches!(e, Effect::StartJob { .. })));
    run(&mut s, Observation::Pass, 604);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn insync_interval_ends_configmap_goes_observing() {
    let mut s = in_sync();
    let fx = run(&mut s, Observation::Pass, 604);
    assert!(fx.contains(&Effect::TakeSnapshot));
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 605);
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
}

#[test]
fn insync_input_changed_goes_resolving() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    let mut s = planning_from(s);
    run(&mut s, no_change(), 4);
    s.metadata.generation = Some(2);
    let fx = run(&mut s, Observation::GenerationMoved, 10);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
    assert!(started(&fx, OperationType::Resolve));
    assert_eq!(st(&s).observed_generation, Some(2));
}

// ----- "What leaves that path, and how it comes back" -----------------------

#[test]
fn idle_realm_conflict_goes_blocked() {
    let mut s = in_sync();
    let fx = run(&mut s, Observation::Realm(RealmVerdict::Conflict), 10);
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::RealmConflict));
    assert!(has_event(&fx, Reason::RealmConflict));
}

#[test]
fn idle_realm_not_authorized_goes_blocked() {
    let mut s = schema("configmap");
    run(&mut s, Observation::Realm(RealmVerdict::NotAuthorized), 0);
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::RealmNotAuthorized));
}

#[test]
fn realm_blocked_rechecks_within_a_minute() {
    let mut s = in_sync();
    let fx = run(&mut s, Observation::Realm(RealmVerdict::Conflict), 10);
    assert!(fx.contains(&Effect::RequeueAt(at(70))));
    let fx = run(&mut s, Observation::Pass, 700);
    assert!(
        !fx.contains(&Effect::TakeSnapshot),
        "the interval does not start the pipeline"
    );
    let fx = run(&mut s, Observation::Realm(RealmVerdict::Ok), 71);
    assert!(
        fx.contains(&Effect::TakeSnapshot),
        "the pipeline starts once the refusal ends"
    );
}

#[test]
fn idle_unsupported_engine_goes_blocked() {
    let mut s = schema("configmap");
    s.spec.target.engine = "Oracle".into();
    assert!(!engine_supported(&s));
    let fx = run(&mut s, Observation::EngineUnsupported, 0);
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(stalled_reason(&s), Some(Reason::UnsupportedEngine));
    assert!(!fx.iter().any(|e| matches!(e, Effect::RequeueAt(_))));
}

#[test]
fn unsupported_engine_waits_for_an_edit() {
    let mut s = schema("git");
    run(&mut s, Observation::EngineUnsupported, 0);
    let fx = run(&mut s, Observation::Pass, 100_000);
    assert!(!started(&fx, OperationType::Resolve));
    s.metadata.generation = Some(2);
    s.spec.target.engine = "PostgreSQL".into();
    let fx = run(&mut s, Observation::GenerationMoved, 100_001);
    assert!(started(&fx, OperationType::Resolve));
}

#[test]
fn idle_suspend_goes_suspended() {
    let mut s = in_sync();
    s.spec.suspend = true;
    let fx = run(&mut s, Observation::SuspendChanged, 10);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    assert!(conditions::is_true(&st(&s).conditions, C::Suspended));
    let fx2 = run(&mut s, Observation::Pass, 10_000);
    assert!(
        !fx.iter()
            .chain(&fx2)
            .any(|e| matches!(e, Effect::StartJob { .. } | Effect::TakeSnapshot))
    );
}

#[test]
fn idle_source_refused_before_job_goes_failed() {
    let mut s = in_sync();
    run(
        &mut s,
        Observation::SourceRefused {
            message: "maxBytes".into(),
        },
        10,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
    assert!(claim(&s).is_none());
    assert_eq!(
        conditions::get(&st(&s).conditions, C::ReconciliationFailed).map(|c| c.reason),
        Some(Reason::SourcePolicyRefused)
    );
}

#[test]
fn idle_configuration_error_goes_failed() {
    let mut s = schema("configmap");
    let fx = run(
        &mut s,
        Observation::ConfigurationError {
            message: "urlFrom".into(),
        },
        0,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
    assert!(fx.contains(&Effect::RequeueAt(at(30))));
}

#[test]
fn idle_verification_policy_changed_goes_verifying() {
    let mut s = planning_from(observing_verified_oci());
    run(&mut s, no_change(), 4);
    let fx = run(&mut s, Observation::VerificationPolicyChanged, 10);
    assert_eq!(phase(&s), Some(SchemaPhase::Verifying));
    assert!(started(&fx, OperationType::Verify));
}

#[test]
fn idle_execution_component_changed_goes_pending() {
    let mut s = in_sync();
    let binding = binding(7);
    run(
        &mut s,
        Observation::ExecutionBindingChanged(binding.clone()),
        10,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert_eq!(st(&s).execution_binding, Some(binding));
}

#[test]
fn read_job_failed_goes_failed_claim_kept() {
    let mut s = observing();
    let fx = run(&mut s, failed("connection refused"), 2);
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
    let c = claim(&s).expect("the claim stays for the next attempt");
    assert_eq!(c.type_, OperationType::Observe);
    assert_eq!(c.retry_not_before, Some(at(32)));
    assert!(fx.contains(&Effect::RequeueAt(at(32))));
    assert_eq!(journal_types(&s), vec![JournalEntryType::OperationFailed]);
    assert!(st(&s).plan.is_none(), "changed nothing");
}

#[test]
fn read_job_unbuildable_goes_failed_claim_kept() {
    let mut s = observing();
    run(&mut s, pod_refused("restricted"), 2);
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
    assert_eq!(claim_type(&s), Some(OperationType::Observe));
}

#[test]
fn read_under_way_suspend_drops_claim() {
    let mut s = planning();
    s.spec.suspend = true;
    let fx = run(&mut s, Observation::SuspendChanged, 4);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    assert!(claim(&s).is_none());
    assert!(
        st(&s).pending_lock_release.is_some(),
        "the drop stages the Lease's release"
    );
    assert!(fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
}

#[test]
fn read_under_way_suspend_drops_claim_but_proof_runs_to_end() {
    let mut s = proving(true);
    s.spec.suspend = true;
    run(&mut s, Observation::SuspendChanged, 11);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert!(claim(&s).is_some(), "the proof's Job runs to its end first");
    let fx = run(&mut s, Observation::DriftObserved(target(1, 0)), 12);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::StartJob { .. } | Effect::ReleaseLease(_)))
    );
    assert!(claim(&s).is_none());
    assert!(
        st(&s)
            .pending_observation
            .as_ref()
            .is_some_and(|p| p.lease_epoch == Some(epoch(2))),
        "the proof is still owed, with its Lease"
    );
    s.spec.suspend = false;
    run(&mut s, Observation::SuspendChanged, 13);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
}

#[test]
fn proof_plan_under_way_when_suspended_concludes() {
    let mut s = proving_plan(true);
    s.spec.suspend = true;
    run(&mut s, Observation::SuspendChanged, 12);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    run(&mut s, no_change(), 13);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::InSync),
        "the proof ends, and its Lease"
    );
    assert!(st(&s).pending_observation.is_none());
    run(&mut s, Observation::Pass, 14);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
}

#[test]
fn suspend_during_apply_lets_it_finish_and_starts_no_new_job() {
    let mut s = applying();
    s.spec.suspend = true;
    run(&mut s, Observation::SuspendChanged, 8);
    assert_eq!(phase(&s), Some(SchemaPhase::Applying));
    let fx = run(
        &mut s,
        Observation::ApplyEnded {
            reported_success: true,
            job_uid: None,
        },
        9,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    assert!(st(&s).pending_observation.is_some());
    assert!(!fx.iter().any(|e| matches!(e, Effect::StartJob { .. })));
}

#[test]
fn read_inputs_changed_discards_result_goes_pending() {
    let mut s = observing();
    run(&mut s, Observation::SnapshotTaken(cm_source(2)), 2);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(claim(&s).is_none());
    let fx = run(&mut s, Observation::DriftObserved(target(1, 3)), 3);
    assert!(
        fx.iter().all(|e| !matches!(e, Effect::StartJob { .. })),
        "result discarded"
    );
}

#[test]
fn blocked_interval_ends_goes_resolving() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    let mut s = verdict(s, destructive(1));
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    run(&mut s, Observation::Pass, 604);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn blocked_input_changed_goes_resolving() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    let mut s = verdict(s, destructive(1));
    s.metadata.generation = Some(2);
    s.spec.policy.allow_destructive = true;
    run(&mut s, Observation::GenerationMoved, 10);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn blocked_target_moved_proof_reads_again_after_retry_interval() {
    let mut s = proving(true);
    run(&mut s, Observation::DriftObserved(target(2, 0)), 11);
    let fx = run(&mut s, Observation::Pass, 20);
    assert!(!started(&fx, OperationType::Observe));
    let fx = run(&mut s, Observation::Pass, 41);
    assert!(
        started(&fx, OperationType::Observe),
        "only its own read runs"
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    assert_eq!(claim(&s).map(|c| c.attempt), Some(2));
    // Still the other target: blocked again.
    run(&mut s, Observation::DriftObserved(target(2, 0)), 42);
    assert_eq!(stalled_reason(&s), Some(Reason::TargetIdentityChanged));
}

#[test]
fn blocked_target_moved_is_not_superseded_by_an_edit() {
    let mut s = proving(true);
    run(&mut s, Observation::DriftObserved(target(2, 0)), 11);
    s.metadata.generation = Some(2);
    run(&mut s, Observation::GenerationMoved, 12);
    assert_eq!(stalled_reason(&s), Some(Reason::TargetIdentityChanged));
    assert!(st(&s).pending_observation.is_some());
    assert!(claim(&s).is_some());
}

#[test]
fn blocked_target_back_proof_continues() {
    let mut s = proving(true);
    run(&mut s, Observation::DriftObserved(target(2, 0)), 11);
    run(&mut s, Observation::Pass, 41);
    let fx = run(&mut s, Observation::DriftObserved(target(1, 0)), 42);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert!(started(&fx, OperationType::Plan));
    run(&mut s, no_change(), 43);
    assert_eq!(phase(&s), Some(SchemaPhase::InSync));
}

#[test]
fn blocked_target_moved_settled_apply_goes_pending() {
    let mut s = proving(true);
    run(&mut s, Observation::DriftObserved(target(2, 0)), 11);
    set_annotation(&mut s, SETTLED_APPLY, "sha256:not-this-one");
    run(&mut s, Observation::SettledApply, 12);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Blocked),
        "only the claim it names"
    );
    let id = st(&s)
        .pending_observation
        .as_ref()
        .map(|p| p.apply_operation_id.clone())
        .unwrap_or_default();
    set_annotation(&mut s, SETTLED_APPLY, &id);
    let fx = run(&mut s, Observation::SettledApply, 13);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(st(&s).pending_observation.is_none());
    assert!(claim(&s).is_none());
    assert!(fx.iter().any(|e| matches!(e, Effect::ReleaseLease(_))));
    let last = st(&s).journal.last().expect("entry");
    assert_eq!(
        (last.type_, last.outcome),
        (JournalEntryType::Verified, Some(JournalOutcome::Unknown))
    );
}

#[test]
fn failed_read_retries_after_interval_phase_stays_failed() {
    let mut s = observing();
    run(&mut s, failed("down"), 2);
    let fx = run(&mut s, Observation::Pass, 10);
    assert!(!started(&fx, OperationType::Observe));
    let fx = run(&mut s, Observation::Pass, 32);
    assert!(started(&fx, OperationType::Observe));
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Failed),
        "the phase stays Failed while it runs"
    );
    assert_eq!(claim(&s).map(|c| c.attempt), Some(2));
    run(&mut s, failed("down"), 33);
    assert_eq!(st(&s).journal.len(), 1);
    assert_eq!(st(&s).journal[0].count, Some(2), "repeats fold");
    run(&mut s, Observation::Pass, 63);
    run(&mut s, Observation::DriftObserved(target(1, 3)), 64);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Planning),
        "what the read's result says"
    );
}

#[test]
fn failed_read_gives_way_to_read_request_goes_pending() {
    let mut s = observing();
    run(&mut s, failed("down"), 2);
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:00:05Z");
    let fx = run(&mut s, Observation::ReadRequest, 5);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Failed),
        "waits for the retry delay"
    );
    assert!(!has_event(&fx, Reason::ReadRestarted));
    let fx = run(&mut s, Observation::Pass, 32);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(claim(&s).is_none());
    assert!(has_event(&fx, Reason::ReadRestarted));
    assert_eq!(
        st(&s).last_read_request.as_deref(),
        Some("2026-01-01T00:00:05Z")
    );
    assert!(
        conditions::is_true(&st(&s).conditions, C::ReconciliationFailed),
        "the failure stays"
    );
    let fx = run(&mut s, Observation::Pass, 33);
    assert!(
        fx.contains(&Effect::TakeSnapshot),
        "the pass starts the Resolve"
    );
}

#[test]
fn failed_read_gives_way_when_interval_passed_for_git() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    run(&mut s, failed("down"), 2);
    let fx = run(&mut s, Observation::Pass, 32);
    assert!(
        started(&fx, OperationType::Observe),
        "interval not passed: retry"
    );
    run(&mut s, failed("down"), 33);
    let fx = run(&mut s, Observation::Pass, 700);
    assert!(has_event(&fx, Reason::ReadRestarted));
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
}

#[test]
fn failed_read_gives_way_at_once_when_source_changes() {
    let mut s = observing();
    run(&mut s, failed("down"), 2);
    let fx = run(&mut s, Observation::SnapshotTaken(cm_source(2)), 3);
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::Pending),
        "at once, inside the delay"
    );
    assert!(has_event(&fx, Reason::ReadRestarted));
    assert!(claim(&s).is_none());
}

#[test]
fn failed_read_giving_way_keeps_the_waiting_plan() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, Observation::SourceResolved(git_source(1)), 1);
    let mut s = verdict(s, plan(1));
    assert_eq!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    run(&mut s, Observation::Pass, 604);
    run(&mut s, Observation::SourceResolved(git_source(1)), 605);
    run(&mut s, failed("down"), 606);
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:10:10Z");
    let fx = run(&mut s, Observation::Pass, 636);
    assert!(has_event(&fx, Reason::ReadRestarted));
    assert!(
        st(&s).plan.is_some(),
        "the Resolve decides whether it still holds"
    );
    run(&mut s, Observation::Pass, 637);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn read_request_changes_nothing_else() {
    let mut s = in_sync();
    let before = st(&s).clone();
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    run(&mut s, Observation::ReadRequest, 60);
    let mut after = st(&s).clone();
    assert_eq!(
        after.last_read_request.take().as_deref(),
        Some("2026-01-01T00:01:00Z")
    );
    assert_eq!(after.next_reconciliation_time.take(), Some(at(60)));
    let mut before = before;
    before.last_read_request = None;
    before.next_reconciliation_time = None;
    assert_eq!(after, before);
}

#[test]
fn step_is_deterministic() {
    let s = awaiting_approval();
    let o = Observation::ApprovalExists(approval_of(&plan(1)));
    assert_eq!(step(&s, &o, &at(6)), step(&s, &o, &at(6)));
}

#[test]
fn conditions_carry_the_generation() {
    let mut s = in_sync();
    s.metadata.generation = Some(5);
    run(&mut s, Observation::GenerationMoved, 10);
    assert_eq!(st(&s).observed_generation, Some(5));
    for c in &st(&s).conditions {
        if matches!(c.type_, C::Ready | C::Reconciling | C::Stalled) {
            assert_eq!(c.observed_generation, Some(5), "{:?}", c.type_);
        }
    }
    assert!(conditions::is_true(&st(&s).conditions, C::Reconciling));
}

#[test]
fn read_request_in_ready_to_apply_starts_a_read_not_an_apply() {
    let mut s = ready_to_apply();
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:00:05Z");
    let fx = run(&mut s, Observation::ReadRequest, 5);
    assert!(has_event(&fx, Reason::ReadRequested));
    assert!(
        claim(&s).is_none(),
        "the request never starts a mutating operation"
    );
    let fx = run(&mut s, Observation::Pass, 6);
    assert!(fx.contains(&Effect::TakeSnapshot));
    assert!(!fx.iter().any(|e| matches!(e, Effect::AcquireLease { .. })));
}

#[test]
fn failed_resolve_ends_on_a_read_request() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, failed("unreachable"), 1);
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:00:05Z");
    let fx = run(&mut s, Observation::Pass, 31);
    assert!(has_event(&fx, Reason::ReadRestarted));
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    let fx = run(&mut s, Observation::Pass, 32);
    assert!(started(&fx, OperationType::Resolve));
    assert_eq!(claim(&s).map(|c| c.attempt), Some(1), "a new claim");
}

#[test]
fn failed_resolve_only_a_read_request_ends_it() {
    let mut s = schema("git");
    run(&mut s, Observation::Pass, 0);
    run(&mut s, failed("unreachable"), 1);
    let fx = run(&mut s, Observation::Pass, 10_000);
    assert!(started(&fx, OperationType::Resolve));
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
}

#[test]
fn failed_no_claim_goes_resolving_after_retry_interval() {
    let mut s = schema("git");
    run(
        &mut s,
        Observation::ConfigurationError {
            message: "x".into(),
        },
        0,
    );
    let fx = run(&mut s, Observation::Pass, 10);
    assert!(!started(&fx, OperationType::Resolve));
    run(&mut s, Observation::Pass, 30);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn failed_suspend_goes_suspended() {
    let mut s = observing();
    run(&mut s, failed("down"), 2);
    s.spec.suspend = true;
    run(&mut s, Observation::SuspendChanged, 3);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    assert!(claim(&s).is_none());
}

#[test]
fn pending_next_pass_goes_resolving() {
    let mut s = verifying_oci();
    s.metadata.generation = Some(2);
    run(&mut s, Observation::GenerationMoved, 2);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    run(&mut s, Observation::Pass, 3);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn pending_with_proof_owed_goes_verifying_convergence() {
    let mut s = proving_plan(true);
    run(&mut s, Observation::LeaseContinuityLost, 12);
    run(&mut s, no_change(), 13);
    assert_eq!(phase(&s), Some(SchemaPhase::Pending));
    assert!(st(&s).pending_observation.is_some());
    let fx = run(&mut s, Observation::Pass, 14);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert!(started(&fx, OperationType::Observe));
}

#[test]
fn a_proof_that_lost_the_apply_lease_is_owed_again_under_a_lease_of_its_own() {
    let mut s = proving_plan(true);
    assert!(
        st(&s)
            .pending_observation
            .as_ref()
            .is_some_and(|p| p.lease_epoch.is_some()),
        "the proof reads under the Apply's Lease"
    );
    run(&mut s, Observation::LeaseContinuityLost, 12);
    run(&mut s, no_change(), 13);
    let owed = st(&s)
        .pending_observation
        .clone()
        .expect("the proof stays owed");
    assert_eq!(
        owed.lease_epoch, None,
        "the lapsed epoch is not read under again"
    );
    run(&mut s, Observation::Pass, 14);
    let c = claim(&s).expect("the proof's Observe");
    assert_eq!(c.type_, OperationType::Observe);
    assert_eq!(c.lease_epoch, None);
}

#[test]
fn suspended_resumed_goes_resolving() {
    let mut s = schema("oci");
    s.spec.suspend = true;
    run(&mut s, Observation::Pass, 0);
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    s.spec.suspend = false;
    s.metadata.generation = Some(2);
    run(&mut s, Observation::SuspendChanged, 5);
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn suspended_resumed_with_proof_owed_goes_verifying_convergence() {
    let mut s = applying();
    s.spec.suspend = true;
    run(
        &mut s,
        Observation::ApplyEnded {
            reported_success: false,
            job_uid: None,
        },
        9,
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    s.spec.suspend = false;
    let fx = run(&mut s, Observation::SuspendChanged, 20);
    assert_eq!(phase(&s), Some(SchemaPhase::VerifyingConvergence));
    assert!(started(&fx, OperationType::Observe));
}

// ----- read requests ---------------------------------------------------------

#[test]
fn read_request_in_insync_records_and_moves_next_reconciliation() {
    let mut s = in_sync();
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut s, Observation::ReadRequest, 60);
    assert_eq!(
        st(&s).last_read_request.as_deref(),
        Some("2026-01-01T00:01:00Z")
    );
    assert_eq!(st(&s).next_reconciliation_time, Some(at(60)));
    assert!(has_event(&fx, Reason::ReadRequested));
    assert_eq!(
        phase(&s),
        Some(SchemaPhase::InSync),
        "the next pass starts the read"
    );
    let fx = run(&mut s, Observation::Pass, 61);
    assert!(fx.contains(&Effect::TakeSnapshot));
    // Answered once.
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 62);
    let mut s = planning_from(s);
    run(&mut s, no_change(), 64);
    let fx = run(&mut s, Observation::ReadRequest, 65);
    assert!(!has_event(&fx, Reason::ReadRequested));
}

#[test]
fn read_request_awaiting_approval_keeps_the_plan() {
    let mut s = awaiting_approval();
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    run(&mut s, Observation::ReadRequest, 60);
    run(&mut s, Observation::Pass, 61);
    run(&mut s, Observation::SnapshotTaken(cm_source(1)), 62);
    assert!(st(&s).plan.is_some());
    assert_eq!(phase(&s), Some(SchemaPhase::Observing));
}

#[test]
fn read_request_policy_blocked_answers() {
    let mut s = verdict(observing(), destructive(1));
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut s, Observation::ReadRequest, 60);
    assert!(has_event(&fx, Reason::ReadRequested));
}

#[test]
fn read_request_waits_while_realm_blocked() {
    let mut s = in_sync();
    run(&mut s, Observation::Realm(RealmVerdict::Conflict), 10);
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut s, Observation::ReadRequest, 60);
    assert!(fx.is_empty() || !has_event(&fx, Reason::ReadRequested));
    assert_eq!(st(&s).last_read_request, None);
}

#[test]
fn read_request_waits_while_target_identity_changed() {
    let mut s = proving(true);
    run(&mut s, Observation::DriftObserved(target(2, 0)), 11);
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    run(&mut s, Observation::ReadRequest, 12);
    assert_eq!(st(&s).last_read_request, None);
}

#[test]
fn read_request_under_way_does_not_answer() {
    let mut s = observing();
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    let fx = run(&mut s, Observation::ReadRequest, 2);
    assert!(!has_event(&fx, Reason::ReadRequested));
    run(&mut s, Observation::DriftObserved(target(1, 0)), 3);
    run(&mut s, lease(1), 4);
    run(&mut s, no_change(), 5);
    assert_eq!(
        st(&s).last_read_request,
        None,
        "not answered by a read that started before it"
    );
    let fx = run(&mut s, Observation::Pass, 6);
    assert!(
        has_event(&fx, Reason::ReadRequested),
        "answered once no operation runs"
    );
}

#[test]
fn read_request_waits_for_apply_and_proof() {
    let mut s = applying();
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:01:00Z");
    run(&mut s, Observation::ReadRequest, 8);
    assert_eq!(st(&s).last_read_request, None);
    run(
        &mut s,
        Observation::ApplyEnded {
            reported_success: true,
            job_uid: None,
        },
        9,
    );
    run(&mut s, Observation::ReadRequest, 10);
    assert_eq!(st(&s).last_read_request, None);
}

#[test]
fn read_request_does_not_shorten_failed_retry() {
    let mut s = schema("git");
    run(
        &mut s,
        Observation::ConfigurationError {
            message: "x".into(),
        },
        0,
    );
    set_annotation(&mut s, READ_REQUESTED_AT, "2026-01-01T00:00:05Z");
    run(&mut s, Observation::ReadRequest, 5);
    assert_eq!(st(&s).last_read_request, None);
    assert_eq!(phase(&s), Some(SchemaPhase::Failed));
    let fx = run(&mut s, Observation::Pass, 30);
    assert!(
        has_event(&fx, Reason::ReadRequested),
        "answered when its retry starts"
    );
    assert_eq!(phase(&s), Some(SchemaPhase::Resolving));
}

#[test]
fn read_request_invalid_recorded_with_warning() {
    let mut s = in_sync();
    set_annotation(&mut s, READ_REQUESTED_AT, "tomorrow");
    let fx = run(&mut s, Observation::ReadRequest, 60);
    assert_eq!(st(&s).last_read_request.as_deref(), Some("tomorrow"));
    assert!(fx.iter().any(|e| matches!(e, Effect::Event { warning: true, reason: Reason::ReadRequestInvalid, message } if message.contains("tomorrow"))));
    assert_eq!(
        st(&s).next_reconciliation_time,
        Some(at(604)),
        "starts nothing"
    );
    let fx = run(&mut s, Observation::Pass, 61);
    assert!(!has_event(&fx, Reason::ReadRequestInvalid), "reported once");
}

#[test]
fn read_request_invalid_answered_inside_retry_delay_and_retry_goes_on() {
    let mut s = observing();
    run(&mut s, failed("down"), 2);
    set_annotation(&mut s, READ_REQUESTED_AT, "later");
    let fx = run(&mut s, Observation::ReadRequest, 5);
    assert!(has_event(&fx, Reason::ReadRequestInvalid));
    assert_eq!(
        claim_type(&s),
        Some(OperationType::Observe),
        "goes on retrying"
    );
    let fx = run(&mut s, Observation::Pass, 32);
    assert!(started(&fx, OperationType::Observe));
}

#[test]
fn read_request_longer_than_64_bytes_recorded_as_digest() {
    let mut s = in_sync();
    let long = format!("2026-01-01T00:01:00.{}Z", "0".repeat(60));
    set_annotation(&mut s, READ_REQUESTED_AT, &long);
    let fx = run(&mut s, Observation::ReadRequest, 60);
    assert!(has_event(&fx, Reason::ReadRequested));
    let recorded = st(&s).last_read_request.clone().unwrap_or_default();
    assert_eq!(recorded, read_request::sha256_hex(long.as_bytes()));
}

// ----- the table in the module doc ------------------------------------------

#[test]
fn module_doc_names_only_existing_tests() {
    let named =
        doc_names_only_existing_tests(include_str!("schema.rs"), include_str!("schema_tests.rs"));
    assert!(named >= 60, "the table names {named} tests");
}
