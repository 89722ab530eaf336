//! The PtahMigration lifecycle as a pure state machine, in the quinn-proto
//! style of [`super::schema`]: [`step`] takes the resource (spec, metadata,
//! status with its claim), one [`Observation`] and the time, and returns the
//! next status and the [`Effect`]s to perform. No client, no clock.
//!
//! How the state is kept: `status.phase` says where the resource is;
//! `status.activeOperation` is the claim (Resolve, Verify, History or Apply;
//! a read between failed attempts has `retryNotBefore` set and
//! `dispatchStarted` clear); `status.lastRun` is the last run, and its
//! `verification` unset while the first reading of the database the run named
//! is still owed; `status.unresolvedRun` is a `Partial` or `Unknown` run that
//! holds every later Apply; the reason a Blocked resource is blocked for is
//! the reason of its `Blocked` condition; the read after a run (VerifyingHistory
//! for one pass, then Reading) is the History claim made before any other
//! reading was recorded since the run ended, and stays bound to what the run
//! ran from. Only Apply takes the database-realm Lease: History mutates
//! nothing.
//!
//! What the controller owes the machine, beyond what it owes the schema's: it
//! publishes the plan [`Effect::PublishPlan`] describes (create, or adopt the
//! one of the same deterministic name) and steps
//! [`Observation::PlanPublished`] or [`Observation::PlanNotPublished`]; it
//! reports every end of a dispatched Apply Job as [`Observation::RunEnded`]
//! (a Job gone or unreadable as `JobLost`); it steps
//! [`Observation::Acknowledged`] for each stamped
//! PtahMigrationRunAcknowledgment of this resource. The machine reads the
//! annotation `operator.ptah.run/unresolved-run` from the resource itself: a
//! pass with no hold and no claim in status takes a copy there as a restored
//! hold (as [`Observation::RestoredFromAnnotation`] does), and every step
//! while status holds a run asks for the copy again if it is missing or
//! differs.
//!
//! The order of writes around the unresolved-run annotation: the controller
//! performs the effects for which [`Effect::precedes_status`] holds
//! ([`Effect::WriteUnresolvedAnnotation`]) before it writes the returned
//! status, and writes no status if that fails; it performs every other
//! effect after the status write ([`Effect::ClearUnresolvedAnnotation`]
//! included). [`Step::before_status`] and [`Step::after_status`] split them.
//! So the copy exists before any status names the hold, and outlives every
//! status that does: a restore that drops status still finds it. A copy that
//! outlived its hold (the status write that settled it landed, the removal
//! did not) is told from a restored one by `status.resolvedRun` or the
//! journal's RunFinished of that operation, and removed.
//!
//! # Seed arrows and their tests
//!
//! "From the source to a plan":
//!
//! | Arrow | Test |
//! | --- | --- |
//! | due → Resolving (OCI) | `new_oci_source_goes_resolving` |
//! | due → Resolving (Git) | `new_git_source_goes_resolving` |
//! | due → Resolving (Flux: a Job fetches its artifact) | `new_flux_source_goes_resolving` |
//! | due → Reading (ConfigMap, the manager takes the snapshot) | `configmap_source_skips_resolving_to_reading` |
//! | Resolving → Verifying (OCI digest pinned) | `resolving_oci_digest_pinned_goes_verifying` |
//! | Resolving → Reading (Git commit resolved) | `resolving_git_commit_goes_reading` |
//! | Resolving → Reading (Flux artifact snapshotted) | `resolving_flux_artifact_snapshotted_goes_reading` |
//! | Resolving → Verifying (Flux `OCIRepository` under a verification policy) | `resolving_flux_oci_repository_under_a_policy_goes_verifying` |
//! | Verifying → Reading (policy satisfied) | `verifying_policy_satisfied_goes_reading` |
//! | Verifying → Blocked (policy refused the artifact) | `verifying_policy_refused_goes_blocked` |
//! | Reading → InSync (nothing pending) | `reading_nothing_pending_goes_in_sync` |
//! | Reading → Planning (pending versions the history can continue) | `reading_pending_versions_goes_planning` |
//! | Reading → Blocked (dirty) | `reading_dirty_goes_blocked_history_dirty` |
//! | Reading → Blocked (modified) | `reading_modified_goes_blocked_history_modified` |
//! | Reading → Blocked (out of order) | `reading_out_of_order_goes_blocked_history_out_of_order` |
//! | Reading → Blocked (ahead) | `reading_ahead_goes_blocked_history_ahead` |
//! | Reading → Blocked (an unsettled run) | `reading_pending_with_unsettled_run_goes_blocked_publishes_no_plan` |
//! | Planning → AwaitingApproval (published, OnApproval) | `planning_on_approval_goes_awaiting_approval` |
//! | Planning → Applying (published, Always) | `planning_always_goes_applying` |
//! | Planning, and it stays (published, apply: Never) | `planning_apply_never_rests_in_planning_ready_false_apply_disabled` |
//!
//! "From a plan to the verdict on its run":
//!
//! | Arrow | Test |
//! | --- | --- |
//! | AwaitingApproval → Applying (the exact approval exists) | `awaiting_approval_exact_approval_goes_applying` |
//! | Planning or AwaitingApproval → Resolving (interval ended first) | `planning_interval_ends_goes_resolving`, `awaiting_approval_interval_ends_goes_resolving` |
//! | Planning or AwaitingApproval → Pending (plan no longer fits) | `awaiting_approval_plan_stale_goes_pending`, `planning_plan_stale_goes_pending` |
//! | Applying → VerifyingHistory (applied) | `applying_applied_goes_verifying_history` |
//! | Applying → VerifyingHistory (nothing to do) | `applying_nothing_to_do_goes_verifying_history` |
//! | Applying → VerifyingHistory (failed past its selection) | `applying_failed_past_selection_goes_verifying_history` |
//! | Applying → Failed (stopped before it selected a migration) | `applying_stopped_before_selection_goes_failed` |
//! | Applying → Blocked (Partial) | `applying_partial_goes_blocked_with_unresolved_run` |
//! | Applying → Blocked (Unknown) | `applying_unknown_goes_blocked_with_unresolved_run` |
//! | Applying → Blocked (a dispatched Job nobody can read) | `applying_job_lost_goes_blocked_unknown`, `applying_job_failed_without_result_goes_blocked_unknown` |
//! | Applying → Pending (what the claim rests on moved before any Job) | `applying_withdrawn_before_job_goes_pending`, `applying_withdrawn_approval_gone_goes_pending` |
//! | Applying → Failed (the Job could not be built) | `applying_job_unbuildable_goes_failed_claim_tries_again` |
//! | VerifyingHistory → Reading (the next pass claims the read) | `verifying_history_next_pass_claims_reading` |
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
//! | no claim → Blocked (a run's record put back from metadata) | `restored_hold_from_annotation_blocks_and_writes_run_finished` |
//! | no claim → Suspended | `idle_suspend_goes_suspended` |
//! | no claim → Verifying (the verification policy changed; as the schema's) | `idle_verification_policy_changed_goes_verifying` |
//! | no claim → Failed (source refused before any Job) | `idle_source_refused_before_job_goes_failed` |
//! | no claim → Failed (configuration error) | `idle_configuration_error_goes_failed` |
//! | no claim → Failed (a plan that could not be published) | `plan_not_published_goes_failed` |
//! | read → the same phase (its Job failed; same read after failureRetryInterval) | `read_job_failed_stays_in_phase_retries_after_interval` |
//! | read → Pending (inputs changed) | `read_inputs_changed_goes_pending` |
//! | read → Pending (an execution component changed) | `read_execution_binding_changed_goes_pending` |
//! | read → Pending (spec.suspend) | `read_under_way_suspend_goes_pending_then_suspended` |
//! | read → Pending (the read gave way) | `read_gives_way_to_read_request_goes_pending` |
//! | read → Failed (Job could not be built) | `read_job_unbuildable_goes_failed` |
//! | Blocked → Resolving (interval ended) | `blocked_interval_ends_goes_resolving` |
//! | Blocked → Resolving (input changed) | `blocked_input_changed_goes_resolving` |
//! | Failed → Resolving (after failureRetryInterval) | `failed_goes_resolving_after_retry_interval` |
//! | Pending → Resolving (the next pass) | `pending_next_pass_goes_resolving` |
//! | Suspended → Resolving (resumed) | `suspended_resumed_goes_resolving` |
//!
//! "Where the path turns", the migration's branches: nothing pending
//! (`reading_nothing_pending_goes_in_sync`); refused, reading again at its
//! interval (`blocked_interval_ends_goes_resolving`,
//! `realm_blocked_rechecks_within_a_minute`); `apply: Never` rests in Planning
//! (`planning_apply_never_rests_in_planning_ready_false_apply_disabled`); plan
//! went stale, the approval does not carry over
//! (`approval_of_a_replaced_plan_authorizes_nothing`); Failed: a dirty row
//! holds it Blocked (`failed_run_dirty_row_holds_blocked_history_dirty`), no
//! row retries (`applying_stopped_before_selection_goes_failed`), a later plan
//! needs its own approval (`failed_run_spent_its_approval_next_plan_needs_new_one`);
//! Partial or Unknown: no plan, no Apply until settled
//! (`unresolved_run_dispatches_no_apply_until_settled`), settled by a clean
//! reading (`clean_reading_of_that_database_settles_unresolved_run`) or an
//! acknowledgment (`acknowledgment_releases_unresolved_run_next_plan_needs_new_approval`),
//! never by another run's acknowledgment
//! (`acknowledgment_of_another_run_settles_nothing`); changes remain
//! (`verified_pending_publishes_a_new_plan`); a read fails
//! (`read_job_failed_stays_in_phase_retries_after_interval`).
//!
//! Runs, the record and the journal:
//!
//! | The seed says | Test |
//! | --- | --- |
//! | History takes no Lease; Apply does | `history_takes_no_lease_apply_does` |
//! | the approval is spent once, at dispatch, with an ApprovalAccepted entry | `approval_accepted_written_at_dispatch_spends_once` |
//! | a read under way decides first whether the plan still holds | `approval_waits_while_a_configmap_read_starts` |
//! | a dispatched Apply is never dispatched again | `dispatched_run_is_never_dispatched_again` |
//! | an Apply runs the approved sequence and nothing else | `exact_sequence_mismatch_records_failed_with_nothing_applied` |
//! | lastRun carries the claim's identity, the source, database and binding | `last_run_copies_identity_from_the_apply_claim` |
//! | verification: the first reading of the database the run named | `first_reading_of_the_named_database_verifies_the_run`, `reading_of_another_database_does_not_verify_the_run` |
//! | a run that named no database gets no verification; a clean reading of the planned one still settles its hold | `run_that_named_no_database_gets_no_verification`, `clean_reading_of_planned_database_settles_hold_of_run_without_result` |
//! | RunFinished, Verified and RunAcknowledged join by operationID | `run_finished_verified_acknowledged_join_by_operation_id` |
//! | one run writes one RunFinished; the hold writes none of its own | `partial_run_writes_one_run_finished` |
//! | a restored hold writes the entry the lost status held; a leftover copy is removed | `restored_hold_from_annotation_blocks_and_writes_run_finished`, `leftover_annotation_copy_is_cleared_not_restored` |
//! | the annotation is written before the status that sets the hold, removed after the one that clears it | `unresolved_annotation_written_before_status_cleared_after`, `hold_missing_its_annotation_copy_writes_it_again` |
//! | a pass finds a hold the annotation holds and status lost, before any read | `pass_restores_hold_from_annotation_when_status_lost` |
//! | lastRun names the execution binding the run ran under | `last_run_records_the_binding_it_ran_under` |
//! | a plan republished while refreshing is the same plan and writes nothing | `republished_same_plan_writes_nothing` |
//! | history.revisions: the newest rows, newest first, bounded | `history_revisions_kept_newest_first_bounded` |
//! | a result across a Lease epoch change is discarded: the run is Unknown | `lease_continuity_lost_run_is_unknown` |
//! | spec.suspend: a run under way is followed to its end | `suspend_during_run_lets_it_finish` |
//! | the read that proves a run stays bound to what the run ran from | `proof_read_stays_bound_to_what_the_run_ran_from` |
//! | an Apply waiting for the realm Lease asks for it again, spending nothing | `apply_waiting_for_lease_asks_again` |
//! | an unsupported engine waits for an edit | `unsupported_engine_waits_for_an_edit` |
//!
//! Read requests (more in [`super::read_request`]):
//!
//! | The seed says | Test |
//! | --- | --- |
//! | answered in InSync, Blocked, AwaitingApproval and a migration's Planning; the next pass reads | `read_request_in_insync_records_and_moves_next_reconciliation`, `read_request_in_planning_records_and_starts_read` |
//! | a plan that waits for approval is kept unless the new reading retires it | `read_request_awaiting_approval_keeps_the_plan` |
//! | an Apply and the read that proves it do not answer | `read_request_waits_during_run_and_its_verification` |
//! | a read already under way does not answer it | `read_request_under_way_does_not_answer` |
//! | engine and realm checks come first | `read_request_waits_while_realm_blocked` |
//! | Blocked for any other reason answers, an unsettled run included | `read_request_in_blocked_unresolved_answers_and_reads` |
//! | does not shorten a retry delay | `read_request_does_not_shorten_failed_retry` |
//! | an invalid value is recorded as answered with `ReadRequestInvalid` | `read_request_invalid_recorded_with_warning` |
//! | a failed read gives way when the interval passed for Git and OCI | `failed_read_gives_way_when_interval_passed_for_git` |
//! | a failed read gives way at once when the source changes | `failed_read_gives_way_at_once_when_source_changes` |
//! | an invalid value is answered inside a retry delay too, and the retry goes on | `read_request_invalid_answered_inside_retry_delay_and_retry_goes_on` |
//!
//! The test `module_doc_names_only_existing_tests` checks every name above
//! exists.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::common::{self, ClaimExtras, InputMove, Machinery};
use super::conditions::{self, Health};
use super::read_request::{self, Running};
use super::realm::coordination_digest;
use crate::api::annotations::UNRESOLVED_RUN;
use crate::api::common::{ApplyPolicy, DatabaseEngine, Identity};
use crate::api::condition::{
    ConditionStatus, MigrationConditionType as C, MigrationPhase as P, Reason,
};
use crate::api::journal::{JournalEntry, JournalEntryType, JournalOutcome, RunFailure};
use crate::api::migration::{
    MigrationHistory, MigrationPlanSummary, MigrationRun, PtahMigration, PtahMigrationStatus,
    Resolution, ResolvedRun, RevisionRow, RunOutcome, RunVerification, UnresolvedRun,
    VerificationOutcome,
};
use crate::api::plan::PlannedMigration;
use crate::api::source::{SourceKind, SourceStatus};
use crate::api::status::{ActiveOperation, Authorization, OperationType, PendingLockRelease};
use crate::protocol::naming::OwnerKind;

pub use super::common::{ApprovalSeen, REALM_RECHECK, RealmVerdict};
/// A reading's verdict and the rows it keeps are the protocol's: the runner
/// reads the same verdict before it runs anything.
pub use crate::protocol::migrations::{HistoryVerdict, REVISIONS_MAX};

/// Each version list of `status.history` keeps at most this many versions.
pub const VERSION_LIST_MAX: usize = 64;

common::with_seen! {
    /// What happened since the last step.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Observation {
        /// A History Job's result: one of the six verdicts and the reading.
        HistoryRead(HistoryReading),
        /// The plan [`Effect::PublishPlan`] asked for is stored.
        PlanPublished(MigrationPlanSummary),
        /// The plan could not be published.
        PlanNotPublished {
            /// Why, naming the field or rule.
            message: String,
        },
        /// A dispatched Apply Job ended and its result was harvested.
        RunEnded(RunReport),
        /// The read-request annotation changed.
        ReadRequest,
        /// A stamped PtahMigrationRunAcknowledgment of this resource.
        Acknowledged(AcknowledgmentSeen),
        /// The annotation copy of a hold, found while status has none (a restore
        /// that dropped status).
        RestoredFromAnnotation(UnresolvedRun),
    }
}

/// A History Job's result.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryReading {
    /// The verdict.
    pub verdict: HistoryVerdict,
    /// The reading as `status.history` keeps it: revisions, counts, the
    /// reading's fingerprint and the database it reached.
    pub history: MigrationHistory,
}

/// How a run ended, as its result says.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEnd {
    /// The sequence was applied.
    Applied,
    /// Nothing was pending when the run looked.
    NothingToDo,
    /// The run failed. `selected`: it had selected a migration (a statement
    /// failed), so the history read back gives the verdict; otherwise it ran
    /// none (the exact-sequence check refused it, say) and is retried.
    Failed {
        /// It had selected a migration.
        selected: bool,
        /// Where it stopped, when a statement failed at the database.
        failure: Option<RunFailure>,
    },
    /// Part of the sequence was applied.
    Partial {
        /// Where it stopped, when a statement failed at the database.
        failure: Option<RunFailure>,
    },
    /// Nobody can tell what the run did.
    Unknown {
        /// The statement whose failure may still have committed.
        failure: Option<RunFailure>,
    },
}

/// A harvested Apply result.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// How it ended.
    pub outcome: RunEnd,
    /// The versions it applied, in order.
    pub applied_versions: Vec<i64>,
    /// The Job's UID.
    pub job_uid: Option<String>,
    /// The database the result named; `None` when the result names none.
    pub target_identity_digest: Option<String>,
    /// A diagnostic: never rows, values or SQL.
    pub message: Option<String>,
}

/// A stamped acknowledgment as the controller sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct AcknowledgmentSeen {
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The run it acknowledges.
    pub operation_id: String,
    /// Who acknowledged, as admission stamped it.
    pub acknowledged_by: Option<Identity>,
}

common::with_shared! {
    /// What the controller performs around the status write.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Effect {
        /// Publish a PtahMigrationPlan of this sequence against this reading
        /// (create, or adopt the one of the same name), then step
        /// [`Observation::PlanPublished`].
        PublishPlan {
            /// The ordered sequence.
            migrations: Vec<PlannedMigration>,
            /// The reading's fingerprint the plan binds.
            history_fingerprint: Option<String>,
            /// The database the reading reached.
            target_identity_digest: Option<String>,
        },
        /// Write `operator.ptah.run/unresolved-run` with this copy, BEFORE the
        /// status that sets `status.unresolvedRun`.
        WriteUnresolvedAnnotation(UnresolvedRun),
        /// Remove `operator.ptah.run/unresolved-run`, AFTER the status that
        /// clears `status.unresolvedRun`.
        ClearUnresolvedAnnotation,
    }
}

impl Effect {
    /// Whether the controller performs this effect before it writes the
    /// status (every other effect comes after).
    pub fn precedes_status(&self) -> bool {
        matches!(self, Effect::WriteUnresolvedAnnotation(_))
    }
}

/// The result of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The status to write (claim, journal, conditions in one write).
    pub status: PtahMigrationStatus,
    /// What to do around it; see [`Effect::precedes_status`].
    pub effects: Vec<Effect>,
}

impl Step {
    /// The effects performed before the status write.
    pub fn before_status(&self) -> impl Iterator<Item = &Effect> {
        self.effects.iter().filter(|e| e.precedes_status())
    }

    /// The effects performed after the status write.
    pub fn after_status(&self) -> impl Iterator<Item = &Effect> {
        self.effects.iter().filter(|e| !e.precedes_status())
    }
}

super::common::shared_words!(Observation, Effect);

/// Steps the migration: pure and deterministic.
pub fn step(m: &PtahMigration, o: &Observation, now: &Time) -> Step {
    let mut machine = Machine {
        m,
        now,
        st: m.status.clone().unwrap_or_default(),
        fx: Vec::new(),
    };
    machine.st.observed_generation = m.metadata.generation;
    machine.st.observed_spec_digest = common::spec_digest(&m.spec);
    if machine.st.covered_since.is_none() {
        machine.st.covered_since = Some(now.clone());
    }
    machine.observe(o);
    machine.keep_annotation_copy();
    machine.requeue();
    Step {
        status: machine.st,
        effects: machine.fx,
    }
}

/// The annotation copy of a hold, as the controller writes it.
pub fn annotation_copy(run: &UnresolvedRun) -> Result<String, serde_json::Error> {
    serde_json::to_string(run)
}

/// The hold an annotation copy holds; `None` for a value that is none.
pub fn restored_copy(value: &str) -> Option<UnresolvedRun> {
    serde_json::from_str(value).ok()
}

/// The newest rows of the revision table, newest first (by when applied, then
/// by version), at most [`REVISIONS_MAX`].
pub fn newest_revisions(mut rows: Vec<RevisionRow>) -> Vec<RevisionRow> {
    rows.sort_by(|a, b| {
        let key = |r: &RevisionRow| (r.applied_at.as_ref().map(|t| t.0), r.version);
        key(b).cmp(&key(a))
    });
    rows.truncate(REVISIONS_MAX);
    rows
}

/// The claim's deterministic Job name.
pub fn job_name(m: &PtahMigration, op: OperationType, operation_id: &str, attempt: i32) -> String {
    let name = m.metadata.name.as_deref().unwrap_or_default();
    common::job_name(OwnerKind::PtahMigration, name, op, operation_id, attempt)
}

/// Whether an engine is one the operator implements (the controller sends
/// [`Observation::EngineUnsupported`] otherwise).
pub fn engine_supported(m: &PtahMigration) -> bool {
    DatabaseEngine::from_spec(&m.spec.target.engine).is_some()
}

fn is_read(op: OperationType) -> bool {
    op != OperationType::Apply
}

fn journal_outcome(o: RunOutcome) -> JournalOutcome {
    match o {
        RunOutcome::UpToDate => JournalOutcome::UpToDate,
        RunOutcome::Applied => JournalOutcome::Applied,
        RunOutcome::Failed => JournalOutcome::Failed,
        RunOutcome::Partial => JournalOutcome::Partial,
        RunOutcome::Unknown => JournalOutcome::Unknown,
    }
}

/// Which input moved under the resource.
struct Machine<'a> {
    m: &'a PtahMigration,
    now: &'a Time,
    st: PtahMigrationStatus,
    fx: Vec<Effect>,
}

impl Machine<'_> {
    // ----- inputs -----------------------------------------------------------

    /// Blocked for a reason the controller checks before anything else.
    fn blocked_by_check(&self) -> bool {
        self.blocked_reason()
            .is_some_and(read_request::blocked_reason_waits)
    }

    fn apply_dispatched(&self) -> bool {
        self.claim_ref()
            .is_some_and(|c| c.type_ == OperationType::Apply && c.dispatch_started)
    }

    /// The first reading after a run is its proof: no reading is recorded
    /// since the run ended.
    fn proof_read(&self) -> bool {
        let Some(run) = self.st.last_run.as_ref() else {
            return false;
        };
        let Some(claim) = self.claim_ref() else {
            return false;
        };
        let ended = run.finished_at.as_ref().map(|t| t.0);
        let read = self
            .st
            .history
            .as_ref()
            .and_then(|h| h.observed_at.as_ref())
            .map(|t| t.0);
        claim.type_ == OperationType::History
            && run.verification.is_none()
            && ended.is_some_and(|e| claim.started_at.0 >= e && read.is_none_or(|r| r < e))
    }

    fn coordination(&self) -> Option<String> {
        let namespace = self.m.metadata.namespace.as_deref().unwrap_or_default();
        coordination_digest(&self.m.spec.target.engine, namespace, &self.m.spec.target)
    }

    // ----- outputs ----------------------------------------------------------

    fn stage_release(&mut self, claim: &ActiveOperation) {
        let Some(epoch) = claim.lease_epoch.clone() else {
            return;
        };
        let release = PendingLockRelease {
            coordination_digest: claim
                .coordination_digest
                .clone()
                .or_else(|| self.coordination())
                .unwrap_or_else(|| common::hex_digest(&["realm", &self.m.spec.target.engine])),
            operation_id: claim.operation_id.clone(),
            lease_epoch: epoch,
            lease_duration_seconds: claim.lease_duration_seconds.unwrap_or(15),
        };
        self.st.pending_lock_release = Some(release.clone());
        self.fx.push(Effect::ReleaseLease(release));
    }

    fn retire_plan(&mut self, reason: Reason) -> Option<MigrationPlanSummary> {
        let plan = self.st.plan.take()?;
        self.fx.push(Effect::RetirePlan {
            name: plan.name.clone(),
            reason,
        });
        if plan.approval_required {
            self.event(
                true,
                Reason::PlanStale,
                format!("plan {} was replaced before it ran", plan.name),
            );
        }
        self.cond(C::ApprovalRequired, ConditionStatus::False, reason, "");
        Some(plan)
    }

    // ----- claims -----------------------------------------------------------

    /// Claims the history read: after a run it reads from what the run ran.
    fn start_history(&mut self) {
        let after_run = self.phase() == Some(P::VerifyingHistory);
        let source = if after_run {
            self.st
                .last_run
                .as_ref()
                .and_then(|r| r.source.clone())
                .or_else(|| self.current_binding())
        } else {
            self.current_binding()
        };
        let claim = self.new_claim(OperationType::History, source);
        self.claim(claim);
        self.settle(P::Reading, Reason::OperationInProgress, "");
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
                    self.retire_plan(Reason::PolicyRefused);
                    self.verification_refused(message);
                }
            }
            Observation::VerificationPolicyChanged => self.verification_policy_changed(),
            Observation::HistoryRead(reading) => self.history_read(reading),
            Observation::PlanPublished(plan) => self.plan_published(plan),
            Observation::PlanNotPublished { message } => {
                if self.phase() == Some(P::Planning) && self.st.active_operation.is_none() {
                    self.fail_idle(Reason::ConfigurationError, message);
                }
            }
            Observation::ApprovalExists(seen) => self.approval_exists(seen),
            Observation::ApprovalAbsent => {
                let withdrawable = self.claim_ref().is_some_and(|c| {
                    c.type_ == OperationType::Apply
                        && !c.dispatch_started
                        && c.authorization == Some(Authorization::Approval)
                });
                if withdrawable {
                    self.withdraw_apply(Reason::ApprovalRevoked);
                }
            }
            Observation::LeaseAcquired {
                epoch,
                duration_seconds,
            } => self.lease_acquired(epoch, *duration_seconds),
            Observation::LeaseLost => {
                // An undispatched Apply waits for the Lease; a dispatched one
                // is followed to its end whatever the Lease says.
                let waiting = self
                    .claim_ref()
                    .is_some_and(|c| c.type_ == OperationType::Apply && !c.dispatch_started);
                if waiting {
                    self.waits_for_lease(OperationType::Apply);
                }
            }
            Observation::LeaseContinuityLost => self.lease_continuity_lost(),
            Observation::RunEnded(report) => {
                if self.apply_dispatched() {
                    self.run_ended(report);
                }
            }
            Observation::JobFailed { reason, message } => match self.claim_type() {
                // A dispatched Apply's Job that left no result: nobody can
                // tell what it did.
                Some(OperationType::Apply) if self.apply_dispatched() => {
                    self.run_ended(&unknown_without_result(message))
                }
                Some(OperationType::Apply) | None => {}
                Some(_) => self.read_failed(*reason, message),
            },
            Observation::JobNotBuilt { reason, message } => self.job_not_built(*reason, message),
            Observation::JobLost => match self.claim_type() {
                Some(OperationType::Apply) if self.apply_dispatched() => {
                    self.run_ended(&unknown_without_result("the Apply Job was lost"))
                }
                Some(OperationType::Apply) | None => {}
                Some(_) => self.read_failed(Reason::OperationFailed, "the Job was lost"),
            },
            Observation::Realm(verdict) => self.realm(*verdict),
            Observation::EngineUnsupported => self.engine_unsupported(),
            Observation::GenerationMoved => self.inputs_moved(InputMove::Generation),
            Observation::ExecutionBindingChanged(binding) => {
                self.inputs_moved(InputMove::Execution(binding.clone()))
            }
            Observation::ConfigurationError { message } => self.configuration_error(message),
            Observation::Acknowledged(ack) => self.acknowledged(ack),
            Observation::RestoredFromAnnotation(copy) => self.restored(copy),
        }
    }

    /// Timers, suspension and read requests.
    fn pass(&mut self) {
        // A hold the annotation still holds and status lost comes first.
        let copy = self.annotation(UNRESOLVED_RUN).and_then(restored_copy);
        if let Some(copy) = copy
            && self.st.unresolved_run.is_none()
            && self.st.active_operation.is_none()
        {
            self.restored(&copy);
            if self.st.unresolved_run.is_some() {
                return;
            }
        }
        let suspend = self.m.spec.suspend;
        if suspend && self.suspend() {
            return;
        }
        if !suspend && self.phase() == Some(P::Suspended) {
            self.start_read();
            return;
        }
        if self.read_request() {
            return;
        }
        self.timers();
    }

    /// Applies `spec.suspend`; true when it decided the step.
    fn suspend(&mut self) -> bool {
        match self.claim_ref() {
            // A run under way is followed to its end.
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => false,
            Some(c) if c.type_ == OperationType::Apply => {
                self.withdraw_apply(Reason::Suspended);
                true
            }
            Some(_) => {
                // A read under way is dropped: Pending for one pass.
                self.drop_claim();
                self.pending(Reason::Suspended);
                true
            }
            None => {
                self.enter_suspended();
                true
            }
        }
    }

    fn timers(&mut self) {
        let next_due = self.due(self.st.next_reconciliation_time.as_ref());
        if let Some(c) = self.st.active_operation.clone() {
            // An Apply still waiting for the realm Lease asks for it again.
            if c.type_ == OperationType::Apply
                && !c.dispatch_started
                && c.lease_epoch.is_none()
                && c.retry_not_before.is_none()
            {
                self.fx.push(Effect::AcquireLease {
                    operation_id: c.operation_id.clone(),
                });
                return;
            }
            // A Job under way, or a claim waiting for its delay.
            if c.dispatch_started
                || c.retry_not_before.is_none()
                || !self.due(c.retry_not_before.as_ref())
            {
                return;
            }
            // Only a read of the source shows a moved tag or branch.
            let interval_passed = is_read(c.type_)
                && c.type_ != OperationType::Resolve
                && !self.proof_read()
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
            if interval_passed {
                self.give_way();
                return;
            }
            let apply = c.type_ == OperationType::Apply;
            let name = self.m.metadata.name.as_deref().unwrap_or_default();
            let next = common::next_attempt(c, OwnerKind::PtahMigration, name);
            self.claim(next);
            if apply {
                self.settle(P::Applying, Reason::OperationInProgress, "");
            }
            return;
        }
        match self.phase() {
            None | Some(P::Pending) => self.start_read(),
            // The run ended: this pass claims the read that proves it.
            Some(P::VerifyingHistory) => self.start_history(),
            // Realm refusals end on the census's verdict; the engine waits
            // for an edit.
            Some(P::Blocked) if self.blocked_by_check() => {}
            Some(P::Blocked | P::InSync | P::AwaitingApproval | P::Planning | P::Failed)
                if next_due =>
            {
                self.start_read()
            }
            _ => {}
        }
    }

    fn snapshot_taken(&mut self, src: &SourceStatus) {
        let changed = self
            .st
            .source
            .as_ref()
            .is_none_or(|old| !common::same_source(old, src));
        match self.claim_ref() {
            // A run under way, and the read that proves it, stay bound to what
            // the run ran from; the snapshot is taken again after them.
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => {}
            Some(_) if self.proof_read() => {}
            Some(c) if c.type_ == OperationType::Apply => {
                if changed {
                    self.st.source = Some(src.clone());
                    self.retire_plan(Reason::PlanNoLongerCurrent);
                    self.withdraw_apply(Reason::InputsChanged);
                }
            }
            Some(_) => {
                if changed {
                    self.st.source = Some(src.clone());
                    self.retire_plan(Reason::PlanNoLongerCurrent);
                    self.discard_read();
                }
            }
            None => {
                // The read that proves a run reads from what the run ran; the
                // snapshot is taken again after it.
                if self.phase() == Some(P::VerifyingHistory) {
                    return;
                }
                if self.blocked_by_check() || self.m.spec.suspend {
                    if changed {
                        self.st.source = Some(src.clone());
                        self.retire_plan(Reason::PlanNoLongerCurrent);
                    }
                    return;
                }
                let idle_verdict = matches!(
                    self.phase(),
                    Some(P::InSync | P::Blocked | P::Planning | P::AwaitingApproval | P::Failed)
                );
                let due = self.due(self.st.next_reconciliation_time.as_ref());
                if !changed && idle_verdict && !due {
                    // An edit of an unselected key: same snapshot, same plan.
                    return;
                }
                let waiting = matches!(self.phase(), Some(P::Planning | P::AwaitingApproval));
                if changed {
                    self.st.source = Some(src.clone());
                    if waiting && self.retire_plan(Reason::PlanNoLongerCurrent).is_some() {
                        // The plan no longer fits the source.
                        self.pending(Reason::PlanNoLongerCurrent);
                        return;
                    }
                    self.retire_plan(Reason::PlanNoLongerCurrent);
                }
                self.cond(
                    C::ArtifactResolved,
                    ConditionStatus::True,
                    Reason::SnapshotTaken,
                    &src.revision,
                );
                self.start_history();
            }
        }
    }

    fn source_changed(&mut self) {
        if self.source_kind() == Some(SourceKind::ConfigMap) {
            // The snapshot decides whether the selected files moved.
            self.fx.push(Effect::TakeSnapshot);
            return;
        }
        // A source policy replaced, or Flux's new artifact: resolve again;
        // the plan made under the old one retires.
        let reason = if self.source_kind() == Some(SourceKind::Flux) {
            Reason::PlanNoLongerCurrent
        } else {
            Reason::PolicyChanged
        };
        self.input_changed(reason, false);
    }

    fn verification_policy_changed(&mut self) {
        if !self.spec_common().verified {
            return;
        }
        self.input_changed(Reason::PolicyChanged, true);
    }

    /// An input the plan binds moved: a run under way ignores it, an Apply
    /// not yet dispatched is withdrawn, a read discarded; with no claim the
    /// plan retires and the source is read again.
    fn input_changed(&mut self, reason: Reason, verification: bool) {
        match self.claim_ref() {
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => {}
            Some(_) if self.proof_read() => {}
            Some(c) if c.type_ == OperationType::Apply => {
                self.retire_plan(reason);
                self.withdraw_apply(Reason::InputsChanged);
            }
            Some(_) => {
                self.retire_plan(reason);
                self.discard_read();
            }
            None => {
                if self.blocked_by_check() || self.phase() == Some(P::VerifyingHistory) {
                    return;
                }
                let waiting = matches!(self.phase(), Some(P::Planning | P::AwaitingApproval));
                if self.retire_plan(reason).is_some() && waiting {
                    self.pending(reason);
                    return;
                }
                if self.m.spec.suspend {
                    return;
                }
                if verification && self.st.source.is_some() {
                    self.start_verify();
                } else {
                    self.start_read();
                }
            }
        }
    }

    /// What the Apply claim rests on moved before any Job existed: it spent
    /// nothing, and the approval is left to the next claim.
    fn withdraw_apply(&mut self, reason: Reason) {
        self.drop_claim();
        self.event(
            false,
            reason,
            "the Apply was withdrawn before its Job existed",
        );
        self.pending(reason);
    }

    fn history_read(&mut self, reading: &HistoryReading) {
        let Some(claim) = self.st.active_operation.clone() else {
            return;
        };
        if claim.type_ != OperationType::History {
            return;
        }
        self.st.active_operation = None;
        let mut history = reading.history.clone();
        // The manager's clock, as lastRun.finishedAt is: which reading came
        // after a run is decided on one clock.
        history.observed_at = Some(self.now.clone());
        history.revisions = newest_revisions(history.revisions);
        history.modified_versions.truncate(VERSION_LIST_MAX);
        history.out_of_order_versions.truncate(VERSION_LIST_MAX);
        history.ahead_versions.truncate(VERSION_LIST_MAX);
        let identity = history.target_identity_digest.clone();
        let fingerprint = history.fingerprint.clone();
        self.st.history = Some(history);
        self.cond(
            C::ReconciliationFailed,
            ConditionStatus::False,
            Reason::Succeeded,
            "",
        );

        // A history read of that database with nothing pending settles a hold.
        if reading.verdict == HistoryVerdict::NothingPending {
            let settles = self.st.unresolved_run.as_ref().is_some_and(|u| {
                u.target_identity_digest.is_some() && u.target_identity_digest == identity
            });
            if settles {
                self.settle_by_history();
            }
        }
        let held = self.st.unresolved_run.is_some();
        let (outcome, reason) = match &reading.verdict {
            HistoryVerdict::Dirty => (VerificationOutcome::Blocked, Reason::HistoryDirty),
            HistoryVerdict::Modified => (VerificationOutcome::Blocked, Reason::HistoryModified),
            HistoryVerdict::OutOfOrder => (VerificationOutcome::Blocked, Reason::HistoryOutOfOrder),
            HistoryVerdict::Ahead => (VerificationOutcome::Blocked, Reason::HistoryAhead),
            // A hold this reading did not settle (another database) stays.
            HistoryVerdict::NothingPending | HistoryVerdict::Pending(_) if held => {
                (VerificationOutcome::Blocked, Reason::OutcomeUnknown)
            }
            HistoryVerdict::NothingPending => (VerificationOutcome::InSync, Reason::HistoryMatched),
            HistoryVerdict::Pending(_) => (VerificationOutcome::Pending, Reason::MigrationsPending),
        };
        self.verify_last_run(identity.as_deref(), outcome, reason, fingerprint.clone());

        match &reading.verdict {
            HistoryVerdict::NothingPending if !held => {
                self.retire_plan(Reason::NoChanges);
                self.cond(
                    C::ApprovalRequired,
                    ConditionStatus::False,
                    Reason::NotRequired,
                    "",
                );
                self.settle(P::InSync, Reason::HistoryMatched, "");
                self.schedule_interval();
            }
            HistoryVerdict::Pending(migrations) if !held => {
                self.settle(P::Planning, Reason::MigrationsPending, "");
                self.schedule_interval();
                self.fx.push(Effect::PublishPlan {
                    migrations: migrations.clone(),
                    history_fingerprint: fingerprint,
                    target_identity_digest: identity,
                });
            }
            _ => {
                // Refused at stage 2, or held by an unsettled run: no plan.
                self.retire_plan(reason);
                let message = if reason == Reason::OutcomeUnknown {
                    "an unresolved run holds every Apply until a clean reading or an acknowledgment settles it"
                } else {
                    "the history refuses a plan until a person repairs it"
                };
                self.block(reason, message);
            }
        }
    }

    /// The first reading of the database the run named verifies the run, with
    /// a Verified entry. A run that named none gets neither.
    fn verify_last_run(
        &mut self,
        identity: Option<&str>,
        outcome: VerificationOutcome,
        reason: Reason,
        fingerprint: Option<String>,
    ) {
        let Some(run) = self.st.last_run.as_mut() else {
            return;
        };
        if run.verification.is_some()
            || run.target_identity_digest.is_none()
            || run.target_identity_digest.as_deref() != identity
        {
            return;
        }
        run.verification = Some(RunVerification {
            outcome,
            reason: Some(reason),
            history_fingerprint: fingerprint,
            read_at: self.now.clone(),
        });
        let mut e = JournalEntry::new(JournalEntryType::Verified, self.now.clone());
        e.operation_id = Some(run.operation_id.clone());
        e.plan_name = run.plan_name.clone();
        e.plan_uid = run.plan_uid.clone();
        e.plan_fingerprint = run.plan_fingerprint.clone();
        e.outcome = Some(match outcome {
            VerificationOutcome::InSync => JournalOutcome::InSync,
            VerificationOutcome::Pending => JournalOutcome::Pending,
            VerificationOutcome::Blocked => JournalOutcome::Blocked,
        });
        e.reason = Some(reason);
        self.journal(e);
    }

    fn settle_by_history(&mut self) {
        let Some(u) = self.st.unresolved_run.take() else {
            return;
        };
        self.st.resolved_run = Some(ResolvedRun {
            operation_id: u.operation_id,
            outcome: u.outcome,
            resolution: Resolution::HistoryRead,
            acknowledgment_name: None,
            acknowledgment_uid: None,
            acknowledged_by: None,
            resolved_at: self.now.clone(),
        });
        self.fx.push(Effect::ClearUnresolvedAnnotation);
        self.event(
            false,
            Reason::HistoryMatched,
            "a clean reading of the run's database settled it",
        );
    }

    fn plan_published(&mut self, plan: &MigrationPlanSummary) {
        if self.phase() != Some(P::Planning)
            || self.st.active_operation.is_some()
            || self.st.unresolved_run.is_some()
        {
            return;
        }
        let apply = self.m.spec.policy.apply;
        let mut plan = plan.clone();
        plan.approval_required = apply == ApplyPolicy::OnApproval;
        let same = self
            .st
            .plan
            .as_ref()
            .is_some_and(|old| old.uid == plan.uid && old.fingerprint == plan.fingerprint);
        // PlanPublished is written for a plan the journal does not hold yet.
        let held = self.st.journal.iter().any(|e| {
            e.type_ == JournalEntryType::PlanPublished && e.plan_uid.as_deref() == Some(&plan.uid)
        });
        if !same {
            self.retire_plan(Reason::PlanStale);
        }
        if !same && !held {
            self.st.plan = Some(plan.clone());
            let identity = (
                plan.name.as_str(),
                plan.uid.as_str(),
                plan.fingerprint.as_str(),
            );
            let e = common::plan_published(identity, plan.created_at.as_ref(), self.now);
            self.journal(e);
            self.event(
                false,
                Reason::Published,
                format!("plan {} published", plan.name),
            );
        }
        self.st.plan = Some(plan.clone());
        match apply {
            ApplyPolicy::Never => {
                let name = self.m.metadata.name.as_deref().unwrap_or_default();
                let message = format!(
                    "plan {} waits and spec.policy.apply is Never: no migration runs; \
                     set it to OnApproval or Always to run them; \
                     `kubectl ptah plan ptahmigration/{name}` shows the versions",
                    plan.name
                );
                self.cond(
                    C::ApprovalRequired,
                    ConditionStatus::False,
                    Reason::ApplyDisabled,
                    &message,
                );
                self.settle(P::Planning, Reason::ApplyDisabled, &message);
                self.schedule_interval();
            }
            ApplyPolicy::OnApproval => {
                self.cond(
                    C::ApprovalRequired,
                    ConditionStatus::True,
                    Reason::AwaitingApproval,
                    &plan.name,
                );
                let waits = format!("plan {} waits for an approval", plan.name);
                self.settle(P::AwaitingApproval, Reason::AwaitingApproval, &waits);
                self.schedule_interval();
            }
            ApplyPolicy::Always => {
                self.cond(
                    C::ApprovalRequired,
                    ConditionStatus::False,
                    Reason::NotRequired,
                    "",
                );
                if self.m.spec.suspend {
                    self.enter_suspended();
                } else {
                    self.claim_apply(None);
                }
            }
        }
    }

    /// Whether an approval was already spent: by the last run, or by any
    /// dispatch the journal still records.
    fn approval_spent(&self, uid: &str) -> bool {
        self.st
            .last_run
            .as_ref()
            .is_some_and(|r| r.approval_uid.as_deref() == Some(uid))
            || common::spent_in(&self.st.journal, uid)
    }

    fn approval_exists(&mut self, seen: &ApprovalSeen) {
        // A read that is starting (a ConfigMap snapshot under way leaves no
        // next read scheduled) decides first whether the plan still holds.
        if self.phase() != Some(P::AwaitingApproval)
            || self.st.next_reconciliation_time.is_none()
            || self.st.active_operation.is_some()
            || self.st.unresolved_run.is_some()
            || self.m.spec.suspend
        {
            return;
        }
        let current = self
            .st
            .plan
            .as_ref()
            .is_some_and(|p| p.uid == seen.plan_uid && p.fingerprint == seen.plan_fingerprint);
        if !current || self.approval_spent(&seen.uid) {
            return;
        }
        self.claim_apply(Some(seen));
    }

    /// Claims the Apply of the current plan: every gate holds.
    fn claim_apply(&mut self, approval: Option<&ApprovalSeen>) {
        if self.st.unresolved_run.is_some() {
            return;
        }
        let Some(c) = self.apply_claim(approval) else {
            return;
        };
        self.claim(c);
        self.settle(P::Applying, Reason::ApplyPending, "");
    }

    fn lease_acquired(&mut self, epoch: &str, secs: i32) {
        let Some(mut c) = self.st.active_operation.clone() else {
            return;
        };
        if c.type_ != OperationType::Apply || c.dispatch_started || c.lease_epoch.is_some() {
            return;
        }
        c.lease_epoch = Some(epoch.to_owned());
        c.lease_duration_seconds = Some(secs);
        self.spend_approval(&c);
        c.dispatch_started = true;
        self.fx.push(Effect::StartJob {
            operation: c.type_,
            job_name: c.job_name.clone().unwrap_or_default(),
        });
        self.st.active_operation = Some(c);
        self.settle(P::Applying, Reason::OperationInProgress, "");
    }

    fn job_not_built(&mut self, reason: Reason, message: &str) {
        let Some(mut c) = self.st.active_operation.clone() else {
            return;
        };
        if is_read(c.type_) {
            // No Job exists; the resource starts again from resolution.
            self.drop_claim();
            self.journal(common::operation_failed(c.type_, reason, self.now));
            self.fail_idle(reason, message);
            return;
        }
        if c.type_ == OperationType::Apply && c.job_uid.is_some() {
            // A Job existed: its end is the run's to report.
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
        self.settle(P::Failed, reason, message);
    }

    /// A run ended: its record, its journal entry, and the verdict's phase.
    fn run_ended(&mut self, report: &RunReport) {
        let Some(c) = self.st.active_operation.take() else {
            return;
        };
        // A result produced across a Lease epoch change is not read.
        let discarded;
        let report = if c.lease_continuity_lost {
            discarded = unknown_without_result("the Lease was not held throughout the run");
            &discarded
        } else {
            report
        };
        let (outcome, failure) = match &report.outcome {
            RunEnd::Applied => (RunOutcome::Applied, None),
            RunEnd::NothingToDo => (RunOutcome::UpToDate, None),
            RunEnd::Failed { failure, .. } => (RunOutcome::Failed, failure.clone()),
            RunEnd::Partial { failure } => (RunOutcome::Partial, failure.clone()),
            RunEnd::Unknown { failure } => (RunOutcome::Unknown, failure.clone()),
        };
        let job_uid = report.job_uid.clone().or(c.job_uid.clone());
        let message = report.message.as_ref().map(|m| {
            let mut m = m.clone();
            if m.len() > 1024 {
                let mut end = 1024;
                while !m.is_char_boundary(end) {
                    end -= 1;
                }
                m.truncate(end);
            }
            m
        });
        self.st.last_run = Some(MigrationRun {
            operation_id: c.operation_id.clone(),
            outcome,
            authorization: c.authorization,
            plan_name: c.plan_name.clone(),
            plan_uid: c.plan_uid.clone(),
            plan_fingerprint: c.plan_fingerprint.clone(),
            approval_name: c.approval_name.clone(),
            approval_uid: c.approval_uid.clone(),
            approver: c.approver.clone(),
            job_name: c.job_name.clone(),
            job_uid: job_uid.clone(),
            applied_versions: report.applied_versions.clone(),
            failure: failure.clone(),
            verification: None,
            target_identity_digest: report.target_identity_digest.clone(),
            coordination_digest: c.coordination_digest.clone(),
            source: c.source.clone(),
            execution_binding: self.st.execution_binding.clone(),
            started_at: Some(c.started_at.clone()),
            finished_at: Some(self.now.clone()),
            message: message.clone(),
        });
        let reason = match outcome {
            RunOutcome::Applied | RunOutcome::UpToDate => Reason::JobCompleted,
            RunOutcome::Failed => Reason::OperationFailed,
            RunOutcome::Partial | RunOutcome::Unknown => Reason::OutcomeUnknown,
        };
        // The run carried the plan out; it is current no more, and the
        // approval it spent authorizes nothing else.
        self.st.plan = None;
        let mut e = common::apply_entry(JournalEntryType::RunFinished, &c, self.now);
        e.job_uid = job_uid.clone();
        e.outcome = Some(journal_outcome(outcome));
        e.reason = Some(reason);
        e.applied_count = Some(i32::try_from(report.applied_versions.len()).unwrap_or(i32::MAX));
        e.failure = failure;
        self.journal(e);
        self.cond(
            C::ApprovalRequired,
            ConditionStatus::False,
            Reason::NotRequired,
            "",
        );
        self.stage_release(&c);
        let note = message.clone().unwrap_or_default();
        match &report.outcome {
            RunEnd::Applied | RunEnd::NothingToDo | RunEnd::Failed { selected: true, .. } => {
                if outcome == RunOutcome::Failed {
                    self.cond(
                        C::ReconciliationFailed,
                        ConditionStatus::True,
                        Reason::OperationFailed,
                        &note,
                    );
                    self.event(
                        true,
                        Reason::OperationFailed,
                        "the run failed at a statement",
                    );
                }
                // VerifyingHistory lasts one pass: the next claims the read.
                self.st.next_reconciliation_time = None;
                self.requeue_now();
                self.settle(P::VerifyingHistory, reason, "");
            }
            RunEnd::Failed {
                selected: false, ..
            } => {
                // It ran none: starts again from resolution after the delay.
                self.fail_idle(
                    Reason::OperationFailed,
                    "the run stopped before it selected a migration",
                );
            }
            RunEnd::Partial { .. } | RunEnd::Unknown { .. } => {
                let hold = UnresolvedRun {
                    operation_id: c.operation_id.clone(),
                    outcome,
                    authorization: c.authorization,
                    plan_name: c.plan_name.clone(),
                    plan_uid: c.plan_uid.clone(),
                    plan_fingerprint: c.plan_fingerprint.clone(),
                    approval_name: c.approval_name.clone(),
                    approval_uid: c.approval_uid.clone(),
                    job_name: c.job_name.clone(),
                    job_uid,
                    // The database the run named, or the planned one as
                    // somewhere to start looking.
                    target_identity_digest: report
                        .target_identity_digest
                        .clone()
                        .or(c.target_identity_digest.clone()),
                    finished_at: Some(self.now.clone()),
                    recorded_at: self.now.clone(),
                };
                self.fx
                    .push(Effect::WriteUnresolvedAnnotation(hold.clone()));
                self.st.unresolved_run = Some(hold);
                self.block(
                    Reason::OutcomeUnknown,
                    "the run's outcome is not established: no Apply until a clean reading or an acknowledgment settles it",
                );
            }
        }
    }

    fn inputs_moved(&mut self, what: InputMove) {
        let execution = matches!(what, InputMove::Execution(_));
        if let InputMove::Execution(binding) = what {
            // A run under way keeps the binding it ran under for lastRun; the
            // controller sends the new one again after it, as it still differs.
            if self.apply_dispatched() {
                return;
            }
            self.st.execution_binding = Some(binding);
        }
        match self.claim_ref() {
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => {}
            Some(c) if c.type_ == OperationType::Apply => {
                if execution {
                    self.retire_plan(Reason::ExecutionBindingChanged);
                }
                self.withdraw_apply(Reason::InputsChanged);
            }
            Some(_) => {
                if execution {
                    self.retire_plan(Reason::ExecutionBindingChanged);
                }
                self.discard_read();
            }
            None if execution => {
                self.retire_plan(Reason::ExecutionBindingChanged);
                self.pending(Reason::ExecutionBindingChanged);
            }
            None => {
                let waits = match self.blocked_reason() {
                    // The census ends a realm refusal; an engine edit that
                    // still names no supported engine changes nothing.
                    Some(Reason::RealmConflict | Reason::RealmNotAuthorized) => true,
                    Some(Reason::UnsupportedEngine) => !engine_supported(self.m),
                    _ => false,
                };
                if waits {
                    return;
                }
                if self.m.spec.suspend {
                    self.enter_suspended();
                } else if self.phase() != Some(P::VerifyingHistory) {
                    // The reading decides whether the plan still holds.
                    self.start_read();
                }
            }
        }
    }

    fn acknowledged(&mut self, ack: &AcknowledgmentSeen) {
        let matches = self
            .st
            .unresolved_run
            .as_ref()
            .is_some_and(|u| u.operation_id == ack.operation_id);
        // Admission stamps who acknowledged; an unstamped one settles nothing.
        if !matches || ack.acknowledged_by.is_none() {
            return;
        }
        let Some(u) = self.st.unresolved_run.take() else {
            return;
        };
        self.st.resolved_run = Some(ResolvedRun {
            operation_id: u.operation_id.clone(),
            outcome: u.outcome,
            resolution: Resolution::Acknowledged,
            acknowledgment_name: Some(ack.name.clone()),
            acknowledgment_uid: Some(ack.uid.clone()),
            acknowledged_by: ack.acknowledged_by.clone(),
            resolved_at: self.now.clone(),
        });
        let mut e = JournalEntry::new(JournalEntryType::RunAcknowledged, self.now.clone());
        e.operation_id = Some(u.operation_id.clone());
        e.plan_name = u.plan_name.clone();
        e.plan_uid = u.plan_uid.clone();
        e.plan_fingerprint = u.plan_fingerprint.clone();
        e.job_name = u.job_name.clone();
        e.job_uid = u.job_uid.clone();
        e.outcome = Some(journal_outcome(u.outcome));
        e.reason = Some(Reason::RunAcknowledged);
        e.acknowledgment_name = Some(ack.name.clone());
        e.acknowledgment_uid = Some(ack.uid.clone());
        e.acknowledged_by = ack.acknowledged_by.clone();
        self.journal(e);
        self.fx.push(Effect::ClearUnresolvedAnnotation);
        self.event(
            false,
            Reason::RunAcknowledged,
            format!("{} acknowledged the unresolved run", ack.name),
        );
        // It reads its history again and plans what is still pending.
        if self.st.active_operation.is_none() && !self.blocked_by_check() {
            self.start_read();
        }
    }

    fn restored(&mut self, copy: &UnresolvedRun) {
        if self.st.active_operation.is_some() || self.st.unresolved_run.is_some() {
            return;
        }
        let settled = self
            .st
            .resolved_run
            .as_ref()
            .is_some_and(|r| r.operation_id == copy.operation_id)
            || self.st.journal.iter().any(|e| {
                e.type_ == JournalEntryType::RunFinished
                    && e.operation_id.as_deref() == Some(copy.operation_id.as_str())
            });
        if settled {
            // A copy that outlived its hold.
            self.fx.push(Effect::ClearUnresolvedAnnotation);
            return;
        }
        // The entry the lost status held, with the outcome and time the hold
        // recorded.
        let mut e = JournalEntry::new(
            JournalEntryType::RunFinished,
            copy.finished_at
                .clone()
                .unwrap_or_else(|| copy.recorded_at.clone()),
        );
        e.operation_id = Some(copy.operation_id.clone());
        e.plan_name = copy.plan_name.clone();
        e.plan_uid = copy.plan_uid.clone();
        e.plan_fingerprint = copy.plan_fingerprint.clone();
        e.authorization = copy.authorization;
        e.approval_name = copy.approval_name.clone();
        e.approval_uid = copy.approval_uid.clone();
        e.job_name = copy.job_name.clone();
        e.job_uid = copy.job_uid.clone();
        e.outcome = Some(journal_outcome(copy.outcome));
        e.reason = Some(Reason::OutcomeUnknown);
        self.st.unresolved_run = Some(copy.clone());
        self.retire_plan(Reason::OutcomeUnknown);
        self.journal(e);
        self.block(
            Reason::OutcomeUnknown,
            "a run's record was put back from metadata: no Apply until it is settled",
        );
    }

    /// While status holds a run, the annotation holds its copy: written again
    /// when it is missing or differs (before the status, as always).
    fn keep_annotation_copy(&mut self) {
        let Some(hold) = self.st.unresolved_run.clone() else {
            return;
        };
        let written = self
            .fx
            .iter()
            .any(|e| matches!(e, Effect::WriteUnresolvedAnnotation(_)));
        let copy = self.annotation(UNRESOLVED_RUN).and_then(restored_copy);
        if !written && copy.as_ref() != Some(&hold) {
            self.fx.push(Effect::WriteUnresolvedAnnotation(hold));
        }
    }
}

impl Machinery for Machine<'_> {
    common::machinery! {
        resource: m,
        phase: P,
        cond: C,
        effect: Effect,
        owner: OwnerKind::PtahMigration,
        answers_in: read_request::MIGRATION_ANSWERS_IN,
    }

    /// Sets the phase, the kstatus trio and `Progressing`/`Blocked`.
    fn settle(&mut self, phase: P, reason: Reason, message: &str) {
        self.st.phase = Some(phase);
        let resting = phase == P::Planning && reason == Reason::ApplyDisabled;
        let health = match phase {
            P::InSync => Health::Ready,
            P::Blocked => Health::Stalled,
            // As a schema's: a plan waiting for a person is in progress.
            P::Suspended => Health::Waiting,
            _ if resting => Health::Waiting,
            _ => Health::Progressing,
        };
        self.kstatus(health, reason, message);
        // Something is coming: an operation, a published plan, an Apply, a
        // run being confirmed.
        let progressing = !matches!(phase, P::InSync | P::Blocked | P::Suspended) && !resting;
        let s = if progressing {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        self.cond(C::Progressing, s, reason, message);
        if phase == P::Blocked {
            self.cond(C::Blocked, ConditionStatus::True, reason, message);
        } else {
            self.cond(C::Blocked, ConditionStatus::False, reason, "");
        }
    }

    fn blocked_reason(&self) -> Option<Reason> {
        if self.phase() != Some(P::Blocked) {
            return None;
        }
        // `Blocked` keeps its reason while a ConfigMap read is taking its
        // snapshot (which moves only the kstatus trio).
        conditions::get(&self.st.conditions, C::Blocked)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| c.reason)
    }

    fn running(&self) -> Running {
        // The run ended and the read that proves it is owed.
        if self.claim_ref().is_none() && self.phase() == Some(P::VerifyingHistory) {
            return Running::ApplyOrProof;
        }
        self.running_claim(self.proof_read())
    }

    /// Drops the claim, staging the release of any Lease it holds.
    fn drop_claim(&mut self) -> Option<ActiveOperation> {
        let claim = self.st.active_operation.take()?;
        self.stage_release(&claim);
        Some(claim)
    }

    fn unrun_plan_uid(&self) -> Option<String> {
        self.st.plan.as_ref().map(|p| p.uid.clone())
    }

    fn enter_suspended(&mut self) {
        if self.phase() != Some(P::Suspended) {
            self.event(false, Reason::Suspended, "spec.suspend: no new Jobs");
        }
        self.settle(P::Suspended, Reason::Suspended, "spec.suspend");
    }

    /// Only an Apply takes the realm Lease: History mutates nothing.
    fn takes_lease(op: OperationType) -> bool {
        op == OperationType::Apply
    }

    fn read_failed(&mut self, reason: Reason, message: &str) {
        let Some(mut c) = self.st.active_operation.clone() else {
            return;
        };
        let mut e = common::operation_failed(c.type_, reason, self.now);
        e.job_name = c.job_name.clone();
        e.job_uid = c.job_uid.clone();
        self.journal(e);
        common::between_attempts(&mut c, common::plus(self.now, self.retry_interval()));
        self.st.active_operation = Some(c);
        self.report_failure(reason, message);
        // It stays in its phase, Progressing with the reason, and runs again
        // under the same claim.
        let phase = self.phase().unwrap_or(P::Pending);
        self.settle(phase, reason, message);
    }

    fn start_database_read(&mut self) {
        self.start_history();
    }

    fn retire(&mut self, reason: Reason) {
        self.retire_plan(reason);
    }

    fn claim_inputs(&self) -> ClaimExtras<'_> {
        ClaimExtras {
            execution_epoch: self.st.execution_binding.as_ref().map(|e| e.epoch.clone()),
            plan_fingerprint: self.st.plan.as_ref().map(|p| p.fingerprint.as_str()),
            coordination_digest: self.coordination(),
            target_identity_digest: self
                .st
                .history
                .as_ref()
                .and_then(|h| h.target_identity_digest.clone()),
        }
    }
}

/// A run nobody can read: `Unknown`, naming no database.
fn unknown_without_result(message: &str) -> RunReport {
    RunReport {
        outcome: RunEnd::Unknown { failure: None },
        applied_versions: Vec::new(),
        job_uid: None,
        target_identity_digest: None,
        message: Some(message.to_owned()),
    }
}

#[cfg(test)]
#[path = "migration_tests.rs"]
mod tests;
