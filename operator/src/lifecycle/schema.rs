//! The PtahSchema lifecycle as a pure state machine, in the quinn-proto
//! style: [`step`] takes the resource (spec, metadata, status with its claim),
//! one [`Observation`] and the time, and returns the next status and the
//! [`Effect`]s to perform. No client, no clock: the controller observes,
//! steps, writes the status (claim, journal and conditions in that one
//! write) and only then performs the effects, so a claim and its
//! `dispatchStarted` marker are durable before any Job exists.
//!
//! How the state is kept: `status.phase` says where the resource is;
//! `status.activeOperation` is the claim (a read-only claim between failed
//! attempts has `retryNotBefore` set and `dispatchStarted` clear);
//! `status.pendingObservation` is the proof owed after an Apply;
//! `status.nextReconciliationTime` is when the next read is due (the interval,
//! a realm re-check, or a failure retry with no claim); the reason a Blocked
//! resource is blocked for is the reason of its `Stalled` condition.
//!
//! What the controller owes the machine: it checks the engine and the realm
//! before anything else and steps [`Observation::EngineUnsupported`] or
//! [`Observation::Realm`] first; it reports every end of an Apply Job as
//! [`Observation::ApplyEnded`] (or `JobLost`), never as a read failure; it
//! sends [`Observation::ExecutionBindingChanged`] only when a recorded
//! binding differs; it keeps renewing the Lease named by the claim or by
//! `status.pendingObservation` (a proof keeps the Apply's Lease until it ends,
//! suspended or not); and it compares the source ConfigMap's content digest
//! with `status.source` on each pass, so a snapshot ignored while an Apply or
//! its proof ran is taken again once they end. The journal is written in the
//! returned status, never as an effect: it costs no request of its own.
//!
//! # Seed arrows and their tests
//!
//! "From the source to a plan's verdict":
//!
//! | Arrow | Test |
//! | --- | --- |
//! | due → Resolving (OCI) | `new_oci_source_goes_resolving` |
//! | due → Resolving (Git) | `new_git_source_goes_resolving` |
//! | due → Resolving (Flux: a Job fetches its artifact) | `new_flux_source_goes_resolving` |
//! | due → Observing (ConfigMap, no Job) | `configmap_source_skips_resolving_to_observing` |
//! | Resolving → Verifying (OCI digest pinned) | `resolving_oci_digest_pinned_goes_verifying` |
//! | Resolving → Observing (Git commit resolved) | `resolving_git_commit_goes_observing` |
//! | Resolving → Observing (Flux artifact snapshotted) | `resolving_flux_artifact_snapshotted_goes_observing` |
//! | Resolving → Verifying (Flux `OCIRepository` under a verification policy) | `resolving_flux_oci_repository_under_a_policy_goes_verifying` |
//! | Verifying → Observing (policy satisfied) | `verifying_policy_satisfied_goes_observing` |
//! | Verifying → Blocked (policy refused) | `verifying_policy_refused_goes_blocked` |
//! | Observing → Planning (drift read) | `observing_drift_read_goes_planning` |
//! | Planning → InSync (no change) | `planning_no_change_goes_in_sync` |
//! | Planning → ReadyToApply (Always, nothing destructive, no privilege change) | `planning_changes_under_always_goes_ready_to_apply` |
//! | Planning → AwaitingApproval (OnApproval) | `planning_changes_on_approval_goes_awaiting_approval` |
//! | Planning → AwaitingApproval (privilege change under Always) | `planning_privilege_change_under_always_goes_awaiting_approval` |
//! | Planning → AwaitingApproval (destructive allowed under Always) | `planning_destructive_allowed_under_always_goes_awaiting_approval` |
//! | Planning → Blocked (protected table) | `planning_protected_table_goes_blocked` |
//! | Planning → Blocked (destructive disallowed) | `planning_destructive_disallowed_goes_blocked` |
//! | Planning → Blocked (apply: Never) | `planning_apply_never_goes_blocked` |
//! | Planning → Observing (target moved) | `planning_target_moved_goes_observing` |
//! | Planning → Observing (lock lost) | `planning_lock_lost_goes_observing` |
//!
//! "From a plan to the proof that it worked":
//!
//! | Arrow | Test |
//! | --- | --- |
//! | ReadyToApply → Applying (every gate holds) | `ready_to_apply_gates_hold_goes_applying` |
//! | ReadyToApply → Resolving (interval ended first) | `ready_to_apply_interval_ends_goes_resolving` |
//! | ReadyToApply → Observing (plan went stale) | `ready_to_apply_plan_stale_goes_observing` |
//! | AwaitingApproval → Applying (exact approval) | `awaiting_approval_goes_straight_to_applying` |
//! | AwaitingApproval → Resolving (interval ended first) | `awaiting_approval_interval_ends_goes_resolving` |
//! | AwaitingApproval → Observing (plan went stale) | `awaiting_approval_plan_stale_goes_observing` |
//! | AwaitingApproval → Resolving (plan went stale: Flux has a new artifact to fetch) | `flux_new_artifact_retires_the_waiting_plan_and_resolves_again` |
//! | Applying → VerifyingConvergence (Job ended, success) | `apply_job_succeeded_goes_verifying_convergence` |
//! | Applying → VerifyingConvergence (Job ended, error) | `apply_job_error_goes_verifying_convergence`, `apply_job_failure_report_goes_verifying_convergence_never_failed` |
//! | Applying → VerifyingConvergence (Job lost) | `apply_job_lost_goes_verifying_convergence` |
//! | Applying → Observing (withdrawn: source moved) | `apply_withdrawn_source_moved_goes_observing` |
//! | Applying → Verifying (withdrawn: verification policy) | `apply_withdrawn_verification_policy_goes_verifying` |
//! | Applying → AwaitingApproval (withdrawn: approval gone) | `apply_withdrawn_approval_gone_goes_awaiting_approval` |
//! | Applying → Pending (withdrawn: execution binding) | `apply_withdrawn_execution_binding_goes_pending` |
//! | Applying → Suspended (withdrawn: spec.suspend) | `apply_withdrawn_suspend_goes_suspended` |
//! | Applying → Failed (Job could not be built) | `apply_job_unbuildable_goes_failed_claim_tries_again` |
//! | VerifyingConvergence → InSync (fresh no-change plan) | `proof_no_change_goes_in_sync` |
//! | VerifyingConvergence → InSync after unknown outcome | `proof_after_unknown_outcome_goes_in_sync_converged_after_unknown` |
//! | VerifyingConvergence → ReadyToApply / AwaitingApproval / Blocked (changes remain) | `proof_changes_remain_goes_ready_to_apply`, `proof_changes_remain_goes_awaiting_approval`, `proof_changes_remain_goes_blocked` |
//! | VerifyingConvergence → Pending (newer generation or execution binding) | `proof_superseded_by_generation_goes_pending`, `proof_superseded_by_execution_binding_goes_pending` |
//! | VerifyingConvergence → Verifying (newer policy) | `proof_superseded_by_policy_goes_verifying` |
//! | VerifyingConvergence → Blocked (proof read another target; claim and Lease stay) | `proof_reads_other_target_blocks_with_claim_kept` |
//! | InSync → Resolving (interval ended) | `insync_interval_ends_goes_resolving` |
//! | InSync → Resolving (input changed) | `insync_input_changed_goes_resolving` |
//!
//! "What leaves that path, and how it comes back":
//!
//! | Arrow | Test |
//! | --- | --- |
//! | no claim → Blocked (realm conflict) | `idle_realm_conflict_goes_blocked` |
//! | no claim → Blocked (realm refusal) | `idle_realm_not_authorized_goes_blocked` |
//! | no claim → Blocked (unsupported engine) | `idle_unsupported_engine_goes_blocked` |
//! | no claim → Suspended | `idle_suspend_goes_suspended` |
//! | no claim → Failed (source refused before any Job) | `idle_source_refused_before_job_goes_failed` |
//! | no claim → Failed (configuration error) | `idle_configuration_error_goes_failed` |
//! | no claim → Verifying (verification policy changed) | `idle_verification_policy_changed_goes_verifying` |
//! | no claim → Pending (execution component changed) | `idle_execution_component_changed_goes_pending` |
//! | read → Failed (Job failed; claim stays) | `read_job_failed_goes_failed_claim_kept` |
//! | read → Failed (Job could not be built; claim stays) | `read_job_unbuildable_goes_failed_claim_kept` |
//! | read → Suspended (claim dropped) | `read_under_way_suspend_drops_claim` |
//! | read → Suspended, a proof's Job runs to its end first | `read_under_way_suspend_drops_claim_but_proof_runs_to_end`, `proof_plan_under_way_when_suspended_concludes`, `suspend_during_apply_lets_it_finish_and_starts_no_new_job` |
//! | read → Pending (inputs changed, result discarded) | `read_inputs_changed_discards_result_goes_pending` |
//! | Blocked → Resolving (interval ended) | `blocked_interval_ends_goes_resolving` |
//! | Blocked → Resolving (input changed) | `blocked_input_changed_goes_resolving` |
//! | Blocked → what the proof's result says (reads again after failureRetryInterval) | `blocked_target_moved_proof_reads_again_after_retry_interval`, `blocked_target_back_proof_continues` |
//! | Blocked → Pending (settled-apply annotation) | `blocked_target_moved_settled_apply_goes_pending` |
//! | Failed → what the read's result says (same read after failureRetryInterval, phase stays Failed) | `failed_read_retries_after_interval_phase_stays_failed` |
//! | Failed → Pending (read gave way) | `failed_read_gives_way_to_read_request_goes_pending` |
//! | Failed → Resolving (no claim, after failureRetryInterval) | `failed_no_claim_goes_resolving_after_retry_interval` |
//! | Failed → Suspended | `failed_suspend_goes_suspended` |
//! | Pending → Resolving (next pass) | `pending_next_pass_goes_resolving` |
//! | Pending → VerifyingConvergence (proof owed) | `pending_with_proof_owed_goes_verifying_convergence` |
//! | Suspended → Resolving (resumed) | `suspended_resumed_goes_resolving` |
//! | Suspended → VerifyingConvergence (resumed with a proof owed) | `suspended_resumed_with_proof_owed_goes_verifying_convergence` |
//!
//! "Where the path turns", the schema's branches: no change
//! (`planning_no_change_goes_in_sync`); refused, reading again at its interval
//! (`blocked_interval_ends_goes_resolving`, `realm_blocked_rechecks_within_a_minute`,
//! `unsupported_engine_waits_for_an_edit`); plan went stale, approval does not
//! carry over (`awaiting_approval_plan_stale_goes_observing`,
//! `approval_of_a_replaced_plan_authorizes_nothing`); Apply uncertain, never
//! replayed (`apply_job_error_goes_verifying_convergence`,
//! `dispatched_apply_is_never_dispatched_again`); changes remain
//! (`proof_changes_remain_goes_awaiting_approval`); a read fails
//! (`read_job_failed_goes_failed_claim_kept`). Lease continuity:
//! `lease_continuity_lost_discards_plan_result`.
//!
//! Read requests, sentence by sentence (more in [`super::read_request`]):
//!
//! | The seed says | Test |
//! | --- | --- |
//! | answered once no operation is running; records, moves `nextReconciliationTime` to now, `ReadRequested`, the next pass reads | `read_request_in_insync_records_and_moves_next_reconciliation`, `read_request_policy_blocked_answers` |
//! | a plan that waits for approval is kept unless the new reading retires it | `read_request_awaiting_approval_keeps_the_plan` |
//! | engine and realm checks come first; `TargetIdentityChanged` waits for its proof | `read_request_waits_while_realm_blocked`, `read_request_waits_while_target_identity_changed` |
//! | never starts a mutating operation; does not shorten a retry delay | `read_request_in_ready_to_apply_starts_a_read_not_an_apply`, `read_request_does_not_shorten_failed_retry` |
//! | a read already under way does not answer it | `read_request_under_way_does_not_answer` |
//! | an annotation changes nothing else | `read_request_changes_nothing_else` |
//! | a failed read gives way when its delay ends; an Apply and its proof do not | `failed_read_gives_way_to_read_request_goes_pending`, `read_request_waits_for_apply_and_proof` |
//! | gives way at once to a source change; to the interval for Git and OCI | `failed_read_gives_way_at_once_when_source_changes`, `failed_read_gives_way_when_interval_passed_for_git` |
//! | giving way keeps a waiting plan; a failed Resolve ends only on a request | `failed_read_giving_way_keeps_the_waiting_plan`, `failed_resolve_only_a_read_request_ends_it`, `failed_resolve_ends_on_a_read_request` |
//! | an invalid value is recorded as answered, once, with `ReadRequestInvalid`, inside a retry delay too | `read_request_invalid_recorded_with_warning`, `read_request_invalid_answered_inside_retry_delay_and_retry_goes_on` |
//! | longer than 64 bytes: recorded as `sha256:<hex>` | `read_request_longer_than_64_bytes_recorded_as_digest` |
//!
//! The test `module_doc_names_only_existing_tests` checks every name above
//! exists.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::common::{self, ClaimExtras, InputMove, Machinery};
use super::conditions::{self, Health};
use super::read_request::{self, Running};
use crate::api::annotations::SETTLED_APPLY;
use crate::api::common::{ApplyPolicy, DatabaseEngine};
use crate::api::condition::{ConditionStatus, Reason, SchemaConditionType as C, SchemaPhase};
use crate::api::journal::{JournalEntry, JournalEntryType, JournalOutcome};
use crate::api::schema::{
    AppliedStatus, ApplyOutcome, ConsumedApproval, PendingObservation, PtahSchema,
    PtahSchemaStatus, SchemaPlanSummary, TargetStatus,
};
use crate::api::source::{SourceKind, SourceStatus};
use crate::api::status::{ActiveOperation, Authorization, OperationType, PendingLockRelease};
use crate::protocol::naming::OwnerKind;

// Both machines share these; the controller names them from here.
pub use super::common::{ApprovalSeen, REALM_RECHECK, RealmVerdict, binding_of};

common::with_seen! {
    /// What happened since the last step.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Observation {
        /// An Observe Job's result: the bounded drift summary and the target it read.
        DriftObserved(TargetStatus),
        /// A Plan Job's result.
        Planned(PlanVerdict),
        /// An Apply Job ended, whatever it reported.
        ApplyEnded {
            /// The runner reported success (still to be proved).
            reported_success: bool,
            /// The Job's UID.
            job_uid: Option<String>,
        },
        /// The read-request annotation changed.
        ReadRequest,
        /// The settled-apply annotation changed.
        SettledApply,
    }
}

/// A Plan Job's verdict.
#[derive(Clone, Debug, PartialEq)]
pub enum PlanVerdict {
    /// A coherent no-change plan: the database converged.
    NoChange {
        /// The database the plan read.
        target_identity_digest: Option<String>,
    },
    /// Changed bytes, stored as the plan `plan` names.
    Changes {
        /// The plan as published (destructive and privilege flags included).
        plan: Box<SchemaPlanSummary>,
        /// The protected table it would change, as the plan names it.
        protected_table: Option<String>,
        /// Its first statement Ptah classed destructive.
        destructive_statement: Option<String>,
        /// The database the plan read.
        target_identity_digest: Option<String>,
    },
    /// The target moved while it planned.
    TargetMoved,
    /// The lock was lost while it planned.
    LockLost,
}

common::with_shared! {
    /// What the controller performs after writing the status.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Effect {
        /// Mark the plan published (current).
        PublishPlan {
            /// The plan's name.
            name: String,
        },
    }
}

/// The result of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The status to write (claim, journal, conditions in one write).
    pub status: PtahSchemaStatus,
    /// What to do once it is written.
    pub effects: Vec<Effect>,
}

super::common::shared_words!(Observation, Effect);

mod apply;
pub mod policy;
mod proof;
mod read;

/// Steps the schema: pure and deterministic.
pub fn step(schema: &PtahSchema, observation: &Observation, now: &Time) -> Step {
    let mut m = Machine {
        schema,
        now,
        st: schema.status.clone().unwrap_or_default(),
        fx: Vec::new(),
    };
    m.st.observed_generation = schema.metadata.generation;
    m.st.observed_spec_digest = common::spec_digest(&schema.spec);
    if m.st.covered_since.is_none() {
        m.st.covered_since = Some(now.clone());
    }
    m.observe(observation);
    m.requeue();
    Step {
        status: m.st,
        effects: m.fx,
    }
}

fn is_read(op: OperationType) -> bool {
    op != OperationType::Apply
}

struct Machine<'a> {
    schema: &'a PtahSchema,
    now: &'a Time,
    st: PtahSchemaStatus,
    fx: Vec<Effect>,
}

impl Machine<'_> {
    // ----- inputs -----------------------------------------------------------

    fn proof_owed(&self) -> bool {
        self.st.pending_observation.is_some()
    }

    /// A read under the proof's claim.
    fn proof_claim(&self) -> bool {
        self.proof_owed() && self.claim_type().is_some_and(is_read)
    }

    // ----- outputs ----------------------------------------------------------

    fn stage_release(&mut self, operation_id: &str, epoch: Option<String>, secs: Option<i32>) {
        if let Some(epoch) = epoch {
            let release = PendingLockRelease {
                coordination_digest: self
                    .st
                    .target
                    .as_ref()
                    .and_then(|t| t.coordination_digest.clone())
                    .unwrap_or_else(|| {
                        common::hex_digest(&["realm", &self.schema.spec.target.engine])
                    }),
                operation_id: operation_id.to_owned(),
                lease_epoch: epoch,
                lease_duration_seconds: secs.unwrap_or(15),
            };
            self.st.pending_lock_release = Some(release.clone());
            self.fx.push(Effect::ReleaseLease(release));
        }
    }

    fn retire_plan(&mut self, reason: Reason) -> Option<SchemaPlanSummary> {
        let plan = self.st.plan.take()?;
        self.fx.push(Effect::RetirePlan {
            name: plan.name.clone(),
            reason,
        });
        if plan.approval_required || plan.approval.is_some() {
            self.event(
                true,
                Reason::PlanStale,
                format!("plan {} was replaced before it ran", plan.name),
            );
        }
        self.cond(C::PlanReady, ConditionStatus::False, reason, "");
        self.cond(C::ApprovalRequired, ConditionStatus::False, reason, "");
        Some(plan)
    }

    // ----- claims -----------------------------------------------------------

    fn start_observe(&mut self, proof: bool) {
        let claim = self.new_claim(OperationType::Observe, self.current_binding());
        self.claim(claim);
        if !proof {
            self.settle(SchemaPhase::Observing, Reason::OperationInProgress, "");
        }
    }

    // ----- the machine ------------------------------------------------------

    fn observe(&mut self, o: &Observation) {
        match o {
            Observation::Pass | Observation::ReadRequest | Observation::SuspendChanged => {
                self.pass()
            }
            Observation::SnapshotTaken(src) => self.snapshot_taken(src),
            Observation::SourceResolved(src) => self.source_resolved(src),
            Observation::SourceRefused { message } => self.source_refused(message),
            Observation::SourceChanged => self.source_changed(),
            Observation::VerificationSatisfied(e) => self.verification_satisfied(e),
            Observation::VerificationRefused { message } => {
                if self.claim_type() == Some(OperationType::Verify) {
                    self.verification_refused(message);
                }
            }
            Observation::VerificationPolicyChanged => self.verification_policy_changed(),
            Observation::DriftObserved(target) => self.drift_observed(target),
            Observation::Planned(verdict) => self.planned(verdict),
            Observation::JobFailed { reason, message } => {
                let dispatched = self
                    .st
                    .active_operation
                    .as_ref()
                    .is_some_and(|c| c.dispatch_started);
                match self.claim_type() {
                    // A finished Apply Job never reaches Failed, whatever it reported.
                    Some(OperationType::Apply) if dispatched => self.apply_ended(false, None),
                    Some(OperationType::Apply) | None => {}
                    Some(_) => self.read_failed(*reason, message),
                }
            }
            Observation::JobNotBuilt { reason, message } => self.job_not_built(*reason, message),
            Observation::JobLost => match self.claim_type() {
                Some(OperationType::Apply) => self.apply_ended(false, None),
                Some(_) => self.read_failed(Reason::OperationFailed, "the Job was lost"),
                None => {}
            },
            Observation::ApplyEnded {
                reported_success,
                job_uid,
            } => {
                if self.claim_type() == Some(OperationType::Apply) {
                    self.apply_ended(*reported_success, job_uid.clone());
                }
            }
            Observation::ApprovalExists(seen) => self.approval_exists(seen),
            Observation::ApprovalAbsent => {
                let withdrawable = self.st.active_operation.as_ref().is_some_and(|c| {
                    c.type_ == OperationType::Apply
                        && !c.dispatch_started
                        && c.authorization == Some(Authorization::Approval)
                });
                if withdrawable {
                    self.drop_claim();
                    let waits = match &self.st.plan {
                        Some(plan) => format!("plan {} waits for an approval", plan.name),
                        None => String::new(),
                    };
                    self.settle(
                        SchemaPhase::AwaitingApproval,
                        Reason::AwaitingApproval,
                        &waits,
                    );
                    self.schedule_interval();
                }
            }
            Observation::LeaseAcquired {
                epoch,
                duration_seconds,
            } => self.lease_acquired(epoch, *duration_seconds),
            Observation::LeaseLost => self.lease_lost(),
            Observation::LeaseContinuityLost => self.lease_continuity_lost(),
            Observation::Realm(verdict) => self.realm(*verdict),
            Observation::EngineUnsupported => self.engine_unsupported(),
            Observation::GenerationMoved => self.inputs_moved(InputMove::Generation),
            Observation::ExecutionBindingChanged(binding) => {
                self.inputs_moved(InputMove::Execution(binding.clone()))
            }
            Observation::ConfigurationError { message } => self.configuration_error(message),
            Observation::SettledApply => self.settled_apply(),
        }
    }

    /// Timers, suspension and read requests.
    fn pass(&mut self) {
        let suspend = self.schema.spec.suspend;
        if suspend && self.suspend() {
            return;
        }
        if !suspend && self.phase() == Some(SchemaPhase::Suspended) {
            self.st.next_reconciliation_time = None;
            if self.proof_owed() {
                self.start_proof();
            } else {
                self.start_read();
            }
            return;
        }
        if self.read_request() {
            return;
        }
        self.timers();
    }

    /// Applies `spec.suspend`; true when it decided the step.
    fn suspend(&mut self) -> bool {
        match self.st.active_operation.as_ref() {
            // An Apply under way, and the read that proves one, run to their end.
            Some(c)
                if c.dispatch_started && (c.type_ == OperationType::Apply || self.proof_owed()) =>
            {
                false
            }
            Some(c) if c.type_ == OperationType::Apply => {
                self.drop_claim();
                self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
                true
            }
            Some(_) if self.proof_owed() => {
                // The proof's claim between attempts waits for the resume.
                self.st.active_operation = None;
                self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
                true
            }
            Some(_) => {
                self.drop_claim();
                self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
                true
            }
            None => {
                if self.phase() != Some(SchemaPhase::Suspended) {
                    self.event(false, Reason::Suspended, "spec.suspend: no new Jobs");
                }
                self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
                true
            }
        }
    }

    fn timers(&mut self) {
        let next_due = self.due(self.st.next_reconciliation_time.as_ref());
        if let Some(c) = self.st.active_operation.clone() {
            // A claim between attempts: retry when its delay ends.
            // A Job under way, or a claim waiting for its Lease or its delay.
            if c.dispatch_started
                || c.retry_not_before.is_none()
                || !self.due(c.retry_not_before.as_ref())
            {
                return;
            }
            let interval_passed = c.type_ != OperationType::Resolve
                && !self.proof_owed()
                && matches!(
                    self.source_kind(),
                    Some(SourceKind::Git | SourceKind::OCI | SourceKind::Flux)
                )
                && self
                    .st
                    .source
                    .as_ref()
                    .and_then(|s| s.resolved_at.as_ref())
                    .is_some_and(|r| common::plus(r, self.interval()).0 <= self.now.0);
            if interval_passed && is_read(c.type_) {
                self.give_way();
                return;
            }
            self.retry(c);
            return;
        }
        match self.phase() {
            None | Some(SchemaPhase::Pending) => {
                if self.proof_owed() {
                    self.start_proof();
                } else {
                    self.start_read();
                }
            }
            Some(SchemaPhase::ReadyToApply) => {
                if next_due {
                    self.start_read();
                } else {
                    self.claim_apply(None);
                }
            }
            Some(SchemaPhase::Blocked) => match self.blocked_reason() {
                // Realm refusals end on the census's verdict; the engine waits
                // for an edit; a moved target for its proof or a person.
                Some(
                    Reason::RealmConflict
                    | Reason::RealmNotAuthorized
                    | Reason::UnsupportedEngine
                    | Reason::TargetIdentityChanged,
                ) => {}
                _ if next_due => self.start_read(),
                _ => {}
            },
            Some(SchemaPhase::InSync | SchemaPhase::AwaitingApproval | SchemaPhase::Failed)
                if next_due =>
            {
                self.start_read()
            }
            _ => {}
        }
    }

    /// The same operation again under the same claim.
    fn retry(&mut self, c: ActiveOperation) {
        let mut c = common::next_attempt(c, OwnerKind::PtahSchema, self.name());
        if c.type_ == OperationType::Plan && !self.proof_owed() {
            c.lease_epoch = None;
        }
        self.claim(c);
    }

    fn in_sync(&mut self, reason: Reason) {
        self.cond(C::InSync, ConditionStatus::True, reason, "");
        self.cond(C::PlanReady, ConditionStatus::False, Reason::NoChanges, "");
        self.cond(
            C::ApprovalRequired,
            ConditionStatus::False,
            Reason::NotRequired,
            "",
        );
        self.cond(
            C::ReconciliationFailed,
            ConditionStatus::False,
            Reason::Succeeded,
            "",
        );
        self.settle(SchemaPhase::InSync, reason, "");
        self.schedule_interval();
    }

    fn job_not_built(&mut self, reason: Reason, message: &str) {
        let Some(mut c) = self.st.active_operation.clone() else {
            return;
        };
        if is_read(c.type_) {
            self.read_failed(reason, message);
            return;
        }
        // No Apply Job exists: the claim tries again after the retry delay.
        common::between_attempts(&mut c, common::plus(self.now, self.retry_interval()));
        self.st.active_operation = Some(c);
        self.journal(common::operation_failed(
            OperationType::Apply,
            reason,
            self.now,
        ));
        self.report_failure(reason, message);
        self.settle(SchemaPhase::Failed, reason, message);
    }

    fn inputs_moved(&mut self, what: InputMove) {
        let execution = matches!(what, InputMove::Execution(_));
        if let InputMove::Execution(binding) = &what {
            self.st.execution_binding = Some(binding.clone());
        }
        if self.proof_owed() {
            let dispatched_apply = self
                .st
                .active_operation
                .as_ref()
                .is_some_and(|c| c.type_ == OperationType::Apply);
            // A proof whose target moved ends only when the target is back or
            // a person settles it.
            let target_moved = self.blocked_reason() == Some(Reason::TargetIdentityChanged);
            if !dispatched_apply && !target_moved {
                self.supersede_proof();
                if execution {
                    self.retire_plan(Reason::ExecutionBindingChanged);
                }
                self.fx.push(Effect::RequeueAt(self.now.clone()));
                self.settle(SchemaPhase::Pending, Reason::ProofInputsChanged, "");
            }
            return;
        }
        match self.st.active_operation.as_ref() {
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => {}
            Some(c) if c.type_ == OperationType::Apply => {
                self.drop_claim();
                if execution {
                    self.retire_plan(Reason::ExecutionBindingChanged);
                }
                self.cond(
                    C::Applying,
                    ConditionStatus::False,
                    Reason::InputsChanged,
                    "",
                );
                self.fx.push(Effect::RequeueAt(self.now.clone()));
                self.settle(SchemaPhase::Pending, Reason::InputsChanged, "");
            }
            Some(_) => self.discard_read(),
            None => {
                if execution {
                    self.retire_plan(Reason::ExecutionBindingChanged);
                    self.fx.push(Effect::RequeueAt(self.now.clone()));
                    self.settle(SchemaPhase::Pending, Reason::ExecutionBindingChanged, "");
                } else if self.phase() != Some(SchemaPhase::Suspended) || !self.schema.spec.suspend
                {
                    if self.schema.spec.suspend {
                        self.suspend();
                    } else {
                        self.st.next_reconciliation_time = None;
                        self.start_read();
                    }
                }
            }
        }
    }
}

impl Machinery for Machine<'_> {
    common::machinery! {
        resource: schema,
        phase: SchemaPhase,
        cond: C,
        effect: Effect,
        owner: OwnerKind::PtahSchema,
        answers_in: read_request::SCHEMA_ANSWERS_IN,
    }

    /// Sets the phase and the kstatus trio.
    fn settle(&mut self, phase: SchemaPhase, reason: Reason, message: &str) {
        self.st.phase = Some(phase);
        let health = match phase {
            SchemaPhase::InSync => Health::Ready,
            SchemaPhase::Blocked => Health::Stalled,
            // A plan waiting for a person still has work coming: kstatus
            // readers (a Flux health check) see it in progress, never failed
            // and never done; the message says what it waits for.
            SchemaPhase::Suspended => Health::Waiting,
            _ => Health::Progressing,
        };
        self.kstatus(health, reason, message);
        let suspended = if phase == SchemaPhase::Suspended {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        self.cond(C::Suspended, suspended, Reason::Suspended, "");
    }

    fn blocked_reason(&self) -> Option<Reason> {
        if self.phase() != Some(SchemaPhase::Blocked) {
            return None;
        }
        conditions::get(&self.st.conditions, C::Stalled).map(|c| c.reason)
    }

    fn running(&self) -> Running {
        self.running_claim(self.proof_owed())
    }

    /// Drops the claim, staging the release of any Lease it holds. An Apply
    /// withdrawn before dispatch spent nothing: its plan keeps no approval.
    fn drop_claim(&mut self) -> Option<ActiveOperation> {
        let claim = self.st.active_operation.take()?;
        if claim.type_ == OperationType::Apply && !claim.dispatch_started {
            if let Some(plan) = self.st.plan.as_mut() {
                plan.approval = None;
            }
            self.cond(
                C::Applying,
                ConditionStatus::False,
                Reason::InputsChanged,
                "",
            );
        }
        if !self.proof_owed() || claim.type_ == OperationType::Apply {
            self.stage_release(
                &claim.operation_id,
                claim.lease_epoch.clone(),
                claim.lease_duration_seconds,
            );
        }
        Some(claim)
    }

    /// An Apply that ended carried the plan out: its entries lose their hold.
    fn unrun_plan_uid(&self) -> Option<String> {
        self.st
            .plan
            .as_ref()
            .filter(|p| {
                self.st
                    .pending_observation
                    .as_ref()
                    .is_none_or(|o| o.plan_uid != p.uid)
            })
            .map(|p| p.uid.clone())
    }

    fn enter_suspended(&mut self) {
        self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
    }

    /// Plan and Apply take the realm Lease; a proof's Plan runs under the
    /// Apply's.
    fn takes_lease(op: OperationType) -> bool {
        matches!(op, OperationType::Plan | OperationType::Apply)
    }

    fn read_failed(&mut self, reason: Reason, message: &str) {
        let Some(mut c) = self.st.active_operation.clone() else {
            return;
        };
        let mut e = common::operation_failed(c.type_, reason, self.now);
        e.job_name = c.job_name.clone();
        e.job_uid = c.job_uid.clone();
        self.journal(e);
        // Between attempts a Plan holds no Lease; a proof keeps its own.
        if c.type_ == OperationType::Plan && !self.proof_owed() {
            self.stage_release(
                &c.operation_id,
                c.lease_epoch.take(),
                c.lease_duration_seconds,
            );
        }
        common::between_attempts(&mut c, common::plus(self.now, self.retry_interval()));
        self.st.active_operation = Some(c);
        self.report_failure(reason, message);
        if self.blocked_reason() != Some(Reason::TargetIdentityChanged) {
            self.settle(SchemaPhase::Failed, reason, message);
        }
    }

    fn start_database_read(&mut self) {
        self.start_observe(false);
    }

    fn engine_refused(&mut self) {
        self.cond(
            C::EngineSupported,
            ConditionStatus::False,
            Reason::UnsupportedEngine,
            "",
        );
    }

    fn retire(&mut self, reason: Reason) {
        self.retire_plan(reason);
    }

    fn claim_inputs(&self) -> ClaimExtras<'_> {
        let target = self.st.target.as_ref();
        ClaimExtras {
            execution_epoch: self.st.execution_binding.as_ref().map(|e| e.epoch.clone()),
            plan_fingerprint: self.st.plan.as_ref().map(|p| p.fingerprint.as_str()),
            coordination_digest: target.and_then(|t| t.coordination_digest.clone()),
            target_identity_digest: target.and_then(|t| t.identity_digest.clone()),
        }
    }

    /// A proof owed is work a realm refusal leaves alone, as a claim is.
    fn holds_work(&self) -> bool {
        self.st.active_operation.is_some() || self.proof_owed()
    }
}

/// The claim's deterministic Job name: the Job builder's, so the name the
/// claim reserves is the name the Job is created under.
pub fn job_name(
    schema: &PtahSchema,
    op: OperationType,
    operation_id: &str,
    attempt: i32,
) -> String {
    let name = schema.metadata.name.as_deref().unwrap_or_default();
    common::job_name(OwnerKind::PtahSchema, name, op, operation_id, attempt)
}

/// Whether an engine is one the operator implements (the controller sends
/// [`Observation::EngineUnsupported`] otherwise).
pub fn engine_supported(schema: &PtahSchema) -> bool {
    DatabaseEngine::from_spec(&schema.spec.target.engine).is_some()
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
