//! The sub-machines both families share, written once over [`Machinery`]:
//! conditions and Events, a claim and its dispatch or Lease, a retry under
//! the same claim, a read request's answer and a failed read giving way, the
//! realm census's verdict, a failure with no claim, a block, and the next
//! timer. A family's machine implements the trait by [`machinery!`] and
//! keeps its own arrows; where the families differ, the trait asks the
//! family (its phases, which operations take the Lease, how it drops a
//! claim and settles a phase).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::{ApprovalSeen, ClaimInputs, REALM_RECHECK, REALM_REFUSED, RealmVerdict, Shared};
use crate::api::annotations::READ_REQUESTED_AT;
use crate::api::common::GoDuration;
use crate::api::condition::{Condition, ConditionStatus, Reason};
use crate::api::conditions::{self, Health};
use crate::api::journal::JournalEntry;
use crate::api::source::{SourceKind, SourceStatus, VerificationEvidence};
use crate::api::status::{ActiveOperation, OperationType, SourceBinding, binding_of};
use crate::lifecycle::read_request::{self, Answer, ReadRequest, Running};
use crate::protocol::naming::OwnerKind;

use crate::api::realm::LEASE_RETRY;

/// The spec fields both families read, borrowed from the resource.
pub struct SpecCommon<'a> {
    /// `spec.interval`.
    pub interval: &'a GoDuration,
    /// `spec.execution.failureRetryInterval`.
    pub failure_retry_interval: &'a GoDuration,
    /// The kind `spec.source` selects.
    pub source_kind: Option<SourceKind>,
    /// Whether a Verify Job checks the source (`Source::verified`).
    pub verified: bool,
    /// `spec.suspend`.
    pub suspend: bool,
}

/// A family's machine as the shared sub-machines see it. The accessors come
/// from [`machinery!`]; the hooks at the end are the family's own words.
pub trait Machinery {
    /// The family's phase.
    type Phase: Copy + PartialEq + 'static;
    /// The family's condition type.
    type Cond: Copy + PartialEq;
    /// The family's effect.
    type Effect: From<Shared>;

    /// Who owns the family's Jobs.
    const OWNER: OwnerKind;
    /// A discarded claim leaves the resource here for one pass.
    const PENDING: Self::Phase;
    /// A failure with a retry.
    const FAILED: Self::Phase;
    /// A verdict that waits for an input.
    const BLOCKED: Self::Phase;
    /// `spec.suspend`.
    const SUSPENDED: Self::Phase;
    /// The phases that answer a read request while nothing runs, besides a
    /// new resource and Pending; an answer in one of them starts the read in
    /// the same pass (elsewhere the next pass does).
    const ANSWERS_IN: &'static [Self::Phase];
    /// The kstatus trio: `Ready`, `Reconciling`, `Stalled`.
    const KSTATUS: (Self::Cond, Self::Cond, Self::Cond);
    /// `ReconciliationFailed`.
    const RECONCILIATION_FAILED: Self::Cond;
    /// `ArtifactVerified`.
    const ARTIFACT_VERIFIED: Self::Cond;
    /// `ArtifactResolved`.
    const ARTIFACT_RESOLVED: Self::Cond;
    /// A Job evaluates the verification policy.
    const VERIFYING: Self::Phase;
    /// A Job reads the Git or OCI source.
    const RESOLVING: Self::Phase;

    // ----- accessors (machinery!) -------------------------------------------

    /// The step's instant.
    fn now(&self) -> &Time;
    /// The resource's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// The spec fields both families read.
    fn spec_common(&self) -> SpecCommon<'_>;
    /// `status.phase`.
    fn phase(&self) -> Option<Self::Phase>;
    /// `status.conditions`.
    fn conditions(&self) -> &[Condition<Self::Cond>];
    /// `status.conditions`, to edit.
    fn conditions_mut(&mut self) -> &mut Vec<Condition<Self::Cond>>;
    /// `status.activeOperation`.
    fn claim_ref(&self) -> Option<&ActiveOperation>;
    /// `status.activeOperation`, to edit.
    fn claim_slot(&mut self) -> &mut Option<ActiveOperation>;
    /// `status.source`.
    fn source_status(&self) -> Option<&SourceStatus>;
    /// `status.source`, to edit.
    fn source_status_mut(&mut self) -> Option<&mut SourceStatus>;
    /// `status.source`, to replace.
    fn source_slot(&mut self) -> &mut Option<SourceStatus>;
    /// `status.nextReconciliationTime`, to edit.
    fn next_reconciliation(&mut self) -> &mut Option<Time>;
    /// `status.nextReconciliationTime`.
    fn next_reconciliation_ref(&self) -> Option<&Time>;
    /// `status.lastAttemptTime`, to edit.
    fn last_attempt(&mut self) -> &mut Option<Time>;
    /// `status.lastReadRequest`, to edit.
    fn last_read_request(&mut self) -> &mut Option<String>;
    /// The effects of this step so far.
    fn effects(&mut self) -> &mut Vec<Self::Effect>;
    /// `status.journal` and `status.coveredSince`, to edit.
    fn journal_slots(&mut self) -> (&mut Vec<JournalEntry>, &mut Option<Time>);
    /// Whether an effect is a requeue.
    fn is_requeue(e: &Self::Effect) -> bool;

    // ----- the family's own words -------------------------------------------

    /// Sets the phase and the conditions that go with it.
    fn settle(&mut self, phase: Self::Phase, reason: Reason, message: &str);
    /// The reason a Blocked resource is blocked for.
    fn blocked_reason(&self) -> Option<Reason>;
    /// What runs, as a read request sees it.
    fn running(&self) -> Running;

    /// What runs when the claim's read is (`proof`) or is not the one that
    /// proves an Apply: an Apply and its proof, a read between two attempts
    /// (its retry due or not), or a read under way.
    fn running_claim(&self, proof: bool) -> Running {
        match self.claim_ref() {
            None => Running::Nothing,
            Some(c) if c.type_ == OperationType::Apply || proof => Running::ApplyOrProof,
            Some(c) if c.retry_not_before.is_some() && !c.dispatch_started => {
                Running::ReadBetweenAttempts {
                    retry_due: self.due(c.retry_not_before.as_ref()),
                }
            }
            Some(_) => Running::ReadUnderWay,
        }
    }
    /// Whether `op` takes the realm Lease before its Job.
    fn takes_lease(op: OperationType) -> bool;
    /// Drops the claim, staging the release of any Lease it holds.
    fn drop_claim(&mut self) -> Option<ActiveOperation>;
    /// `spec.suspend` holds and no claim is left: `Suspended`.
    fn enter_suspended(&mut self);

    /// Starts the read the interval starts: Resolve (a Job for Git and OCI;
    /// the snapshot for a ConfigMap, which shows the database read's phase,
    /// never Resolving), unless the resource is suspended.
    fn start_read(&mut self) {
        if self.spec_common().suspend {
            self.enter_suspended();
            return;
        }
        *self.next_reconciliation() = None;
        match self.source_kind() {
            Some(SourceKind::ConfigMap) => {
                // The phase moves with the snapshot's write; the conditions
                // say now that work is under way for this generation.
                self.effects().push(Shared::TakeSnapshot.into());
                self.kstatus(
                    Health::Progressing,
                    Reason::Refreshing,
                    "reading the ConfigMap and the database again",
                );
            }
            Some(_) => {
                let claim = self.new_claim(OperationType::Resolve, None);
                self.claim(claim);
                self.settle(Self::RESOLVING, Reason::OperationInProgress, "");
            }
            None => self.fail_idle(Reason::ConfigurationError, "spec.source selects no source"),
        }
    }
    /// The plan nothing has carried out yet, whose entries the journal
    /// keeps past its bounds.
    fn unrun_plan_uid(&self) -> Option<String>;

    /// Appends a journal entry, in the status write that records it.
    fn journal(&mut self, entry: JournalEntry) {
        let pending = self.unrun_plan_uid();
        let (journal, covered_since) = self.journal_slots();
        crate::lifecycle::journal::append(
            journal,
            covered_since,
            entry,
            crate::lifecycle::journal::Kept {
                pending_plan_uid: pending.as_deref(),
            },
        );
    }
    /// The new claim's inputs this family fills in beyond the common ones:
    /// execution epoch, plan fingerprint, coordination and target identity.
    fn claim_inputs(&self) -> ClaimExtras<'_>;
    /// A read-only operation's attempt failed.
    fn read_failed(&mut self, reason: Reason, message: &str);
    /// Claims the database read that follows a pinned, accepted source:
    /// Observe for a schema, History for a migration.
    fn start_database_read(&mut self);
    /// Retires the current plan: every approval of it is stale.
    fn retire(&mut self, reason: Reason);
    /// The current plan's name, UID and fingerprint (`status.plan`).
    fn plan_identity(&self) -> Option<(&str, &str, &str)>;
    /// What a family records beside `Blocked` for an unsupported engine.
    fn engine_refused(&mut self) {}
    /// Work that a realm refusal leaves alone: a claim, or a proof owed.
    fn holds_work(&self) -> bool {
        self.claim_ref().is_some()
    }

    // ----- inputs -----------------------------------------------------------

    /// `metadata.generation`.
    fn generation(&self) -> Option<i64> {
        self.meta().generation
    }

    /// `metadata.name`.
    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// `spec.interval`.
    fn interval(&self) -> Duration {
        super::interval(self.spec_common().interval)
    }

    /// `spec.execution.failureRetryInterval`.
    fn retry_interval(&self) -> Duration {
        super::retry_interval(self.spec_common().failure_retry_interval)
    }

    /// The kind `spec.source` selects.
    fn source_kind(&self) -> Option<SourceKind> {
        self.spec_common().source_kind
    }

    /// Annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str> {
        super::annotation(self.meta(), key)
    }

    /// Whether a timer set to `at` has fired.
    fn due(&self, at: Option<&Time>) -> bool {
        super::due(at, self.now())
    }

    /// The claim's operation.
    fn claim_type(&self) -> Option<OperationType> {
        self.claim_ref().map(|c| c.type_)
    }

    /// What status records as resolved, as a claim binds it.
    fn current_binding(&self) -> Option<SourceBinding> {
        self.source_status().map(binding_of)
    }

    // ----- outputs ----------------------------------------------------------

    /// Emits an Event.
    fn event(&mut self, warning: bool, reason: Reason, message: impl Into<String>) {
        let message = message.into();
        self.effects().push(
            Shared::Event {
                warning,
                reason,
                message,
            }
            .into(),
        );
    }

    /// An undispatched `op` claim whose database realm Lease another
    /// operation holds: the phase stays, the Ready message says what it
    /// waits for, and it asks again in [`LEASE_RETRY`] unless the Lease is
    /// released first (the watch wakes it).
    fn waits_for_lease(&mut self, op: OperationType) {
        if let Some(phase) = self.phase() {
            let message = format!(
                "the {} waits for its database's realm Lease, which another operation holds; \
                 it is woken when the Lease is released, and asks again every {} s",
                crate::protocol::naming::operation_name(op),
                LEASE_RETRY.as_secs()
            );
            self.settle(phase, Reason::OperationInProgress, &message);
        }
        let at = super::plus(self.now(), LEASE_RETRY);
        self.effects().push(Shared::RequeueAt(at).into());
    }

    /// Steps again now.
    fn requeue_now(&mut self) {
        let now = self.now().clone();
        self.effects().push(Shared::RequeueAt(now).into());
    }

    /// The kstatus trio for `health`.
    fn kstatus(&mut self, health: Health, reason: Reason, message: &str) {
        let (g, now) = (self.generation(), self.now().clone());
        let trio = Self::KSTATUS;
        conditions::set_kstatus(
            self.conditions_mut(),
            trio,
            health,
            reason,
            message,
            g,
            &now,
        );
    }

    /// Sets condition `t`.
    fn cond(&mut self, t: Self::Cond, s: ConditionStatus, r: Reason, msg: &str) {
        let (g, now) = (self.generation(), self.now().clone());
        conditions::set(self.conditions_mut(), t, s, r, msg, g, &now);
    }

    /// `ReconciliationFailed` with the reason, and a Warning saying it.
    fn report_failure(&mut self, reason: Reason, message: &str) {
        let t = Self::RECONCILIATION_FAILED;
        self.cond(t, ConditionStatus::True, reason, message);
        self.event(true, reason, message);
    }

    /// The next read at the interval.
    fn schedule_interval(&mut self) {
        let at = super::plus(self.now(), self.interval());
        *self.next_reconciliation() = Some(at);
    }

    /// A failure with no claim: `Failed`, read again after the retry delay.
    fn fail_idle(&mut self, reason: Reason, message: &str) {
        let at = super::plus(self.now(), self.retry_interval());
        *self.next_reconciliation() = Some(at);
        self.report_failure(reason, message);
        self.settle(Self::FAILED, reason, message);
    }

    /// `Blocked` for `reason`, a Warning the first time, and when to look
    /// again: the census's re-check for a realm refusal, never for an
    /// unsupported engine (an edit wakes it), nothing of its own while a
    /// moved target waits for its proof, otherwise the interval.
    fn block(&mut self, reason: Reason, message: &str) {
        if self.blocked_reason() != Some(reason) {
            self.event(true, reason, message);
        }
        self.settle(Self::BLOCKED, reason, message);
        match reason {
            Reason::RealmConflict | Reason::RealmNotAuthorized => {
                let every = self.interval().min(REALM_RECHECK);
                let at = super::plus(self.now(), every);
                *self.next_reconciliation() = Some(at);
            }
            Reason::UnsupportedEngine => *self.next_reconciliation() = None,
            Reason::TargetIdentityChanged => {}
            _ => self.schedule_interval(),
        }
    }

    /// Pending for one pass: the claim was discarded or withdrawn.
    fn pending(&mut self, reason: Reason) {
        self.requeue_now();
        self.settle(Self::PENDING, reason, "");
    }

    // ----- claims -----------------------------------------------------------

    /// A claim for `op` reading `source`, attempt 1.
    fn new_claim(&self, op: OperationType, source: Option<SourceBinding>) -> ActiveOperation {
        let extras = self.claim_inputs();
        super::new_claim(
            ClaimInputs {
                owner: Self::OWNER,
                resource: self.name(),
                uid: self.meta().uid.as_deref().unwrap_or_default(),
                generation: self.generation(),
                op,
                source,
                execution_epoch: extras.execution_epoch,
                plan_fingerprint: extras.plan_fingerprint,
                coordination_digest: extras.coordination_digest,
                target_identity_digest: extras.target_identity_digest,
            },
            self.now(),
        )
    }

    /// Claims `claim` and, unless it takes the realm Lease first, dispatches
    /// it (written before its Job: `dispatchStarted` is in this status).
    fn claim(&mut self, mut claim: ActiveOperation) {
        *self.last_attempt() = Some(self.now().clone());
        let effect = if Self::takes_lease(claim.type_) && claim.lease_epoch.is_none() {
            Shared::AcquireLease {
                operation_id: claim.operation_id.clone(),
            }
        } else {
            claim.dispatch_started = true;
            Shared::StartJob {
                operation: claim.type_,
                job_name: claim.job_name.clone().unwrap_or_default(),
            }
        };
        self.effects().push(effect.into());
        *self.claim_slot() = Some(claim);
    }

    /// The Apply claim of the current plan, bound to it and to what
    /// authorizes it: the approval seen, or the policy.
    fn apply_claim(&self, approval: Option<&ApprovalSeen>) -> Option<ActiveOperation> {
        let plan = self.plan_identity()?;
        let mut c = self.new_claim(OperationType::Apply, self.current_binding());
        super::authorize(&mut c, plan, approval);
        Some(c)
    }

    /// Spends the approval Apply claim `c` names, once, at its dispatch:
    /// marked consumed, and `ApprovalAccepted` in the journal.
    fn spend_approval(&mut self, c: &ActiveOperation) {
        if let (Some(name), Some(uid)) = (c.approval_name.clone(), c.approval_uid.clone()) {
            let e = super::approval_accepted(c, &name, &uid, self.now());
            self.effects()
                .push(Shared::SpendApproval { name, uid }.into());
            self.journal(e);
        }
    }

    /// The same operation again under the same claim.
    fn next_attempt(&self, c: ActiveOperation) -> ActiveOperation {
        super::next_attempt(c, Self::OWNER, self.name())
    }

    // ----- read requests ----------------------------------------------------

    /// Decides the family's answer to an unanswered request.
    fn decide(&self, request: &ReadRequest, retry_due: bool) -> Answer {
        let phases = read_request::Phases {
            now: self.phase(),
            pending: Self::PENDING,
            blocked: Self::BLOCKED,
            failed: Self::FAILED,
            answers_in: Self::ANSWERS_IN,
        };
        read_request::decide(
            request,
            &phases,
            self.blocked_reason(),
            self.running(),
            retry_due,
        )
    }

    /// Answers a read request; true when it decided the step.
    fn read_request(&mut self) -> bool {
        let last = self.last_read_request().clone();
        let Some(req) =
            read_request::unanswered(self.annotation(READ_REQUESTED_AT), last.as_deref())
        else {
            return false;
        };
        let retry_due = self.due(self.next_reconciliation_ref());
        match self.decide(&req, retry_due) {
            Answer::Wait => false,
            Answer::Invalid => {
                let message = super::invalid_read_request(&req.recorded);
                *self.last_read_request() = Some(req.recorded);
                self.event(true, Reason::ReadRequestInvalid, message);
                false
            }
            Answer::Answer => {
                *self.last_read_request() = Some(req.recorded);
                *self.next_reconciliation() = Some(self.now().clone());
                self.event(false, Reason::ReadRequested, "a read was requested");
                self.requeue_now();
                // Pending, a new resource and a Failed one whose retry starts
                // start the read in the next pass.
                self.phase().is_some_and(|p| Self::ANSWERS_IN.contains(&p))
            }
            Answer::GiveWay => {
                *self.last_read_request() = Some(req.recorded);
                self.give_way();
                true
            }
        }
    }

    /// A failed read retires its claim for a new Resolve.
    fn give_way(&mut self) {
        self.drop_claim();
        self.event(
            false,
            Reason::ReadRestarted,
            "a failed read gave way to a new Resolve",
        );
        *self.next_reconciliation() = Some(self.now().clone());
        self.pending(Reason::ReadRestarted);
    }

    /// A read whose inputs moved: result discarded, Pending for one pass.
    /// Between two failed attempts, with no Job of its own, that is the read
    /// giving way to a new Resolve (`ReadRestarted`), at once.
    fn discard_read(&mut self) {
        if matches!(self.running(), Running::ReadBetweenAttempts { .. }) {
            self.give_way();
            return;
        }
        self.drop_claim();
        self.event(
            false,
            Reason::InputsChanged,
            "inputs changed: the read's result is discarded",
        );
        self.pending(Reason::InputsChanged);
    }

    /// Whether a failed read of Git or OCI content has outlived the
    /// interval since its resolution: only a new Resolve shows a moved tag
    /// or branch.
    fn resolution_outlived(&self, c: &ActiveOperation) -> bool {
        let interval = self.interval();
        c.type_ != OperationType::Resolve
            && matches!(
                self.source_kind(),
                Some(SourceKind::Git | SourceKind::OCI | SourceKind::Flux)
            )
            && self
                .source_status()
                .and_then(|s| s.resolved_at.as_ref())
                .is_some_and(|r| super::plus(r, interval).0 <= self.now().0)
    }

    // ----- observations in shared words ------------------------------------

    /// The source policy refused the source: a Resolve's failure, or with no
    /// claim a failure of the resource.
    fn source_refused(&mut self, message: &str) {
        if self.claim_type() == Some(OperationType::Resolve) {
            self.read_failed(Reason::SourcePolicyRefused, message);
        } else if self.claim_ref().is_none() {
            self.fail_idle(Reason::SourcePolicyRefused, message);
        }
    }

    /// Verify accepted the artifact: its evidence in status, then the read.
    fn verification_satisfied(&mut self, evidence: &VerificationEvidence) {
        if self.claim_type() != Some(OperationType::Verify) {
            return;
        }
        *self.claim_slot() = None;
        if let Some(src) = self.source_status_mut() {
            src.verification = Some(evidence.clone());
        }
        let t = Self::ARTIFACT_VERIFIED;
        self.cond(t, ConditionStatus::True, Reason::PolicySatisfied, "");
        self.start_database_read();
    }

    /// A Resolve Job pinned the Git commit, the OCI digest or the Flux
    /// artifact: an OCI artifact (or a Flux `OCIRepository` under a
    /// verification policy) is verified next, other content read at once. Other content
    /// than the plan was made from retires the plan.
    fn source_resolved(&mut self, src: &SourceStatus) {
        if self.claim_type() != Some(OperationType::Resolve) {
            return;
        }
        *self.claim_slot() = None;
        if self
            .source_status()
            .is_some_and(|old| !super::same_source(old, src))
        {
            self.retire(Reason::PlanNoLongerCurrent);
        }
        let (src, reason) = super::resolution(src, self.now());
        let verify = self.spec_common().verified;
        let revision = src.revision.clone();
        *self.source_slot() = Some(src);
        let t = Self::ARTIFACT_RESOLVED;
        self.cond(t, ConditionStatus::True, reason, &revision);
        if verify {
            self.start_verify();
        } else {
            self.start_database_read();
        }
    }

    /// Claims Verify of the pinned artifact.
    fn start_verify(&mut self) {
        let claim = self.new_claim(OperationType::Verify, self.current_binding());
        self.claim(claim);
        self.settle(Self::VERIFYING, Reason::OperationInProgress, "");
    }

    /// Verify refused the artifact: `Blocked` until an input changes.
    fn verification_refused(&mut self, message: &str) {
        *self.claim_slot() = None;
        let t = Self::ARTIFACT_VERIFIED;
        self.cond(t, ConditionStatus::False, Reason::PolicyRefused, message);
        self.block(Reason::PolicyRefused, message);
    }

    /// The persisted epoch no longer owns an uninterrupted lock interval.
    fn lease_continuity_lost(&mut self) {
        if let Some(c) = self.claim_slot().as_mut() {
            c.lease_continuity_lost = true;
        }
    }

    /// `spec.target.engine` is not one the operator implements.
    fn engine_unsupported(&mut self) {
        if self.claim_ref().is_none() {
            self.engine_refused();
            self.block(
                Reason::UnsupportedEngine,
                "spec.target.engine is not supported",
            );
        }
    }

    /// The resource or something it names is misconfigured.
    fn configuration_error(&mut self, message: &str) {
        if self.claim_ref().is_none() {
            self.fail_idle(Reason::ConfigurationError, message);
        }
    }

    // ----- the realm --------------------------------------------------------

    /// The census's verdict: a refusal blocks a resource with no work under
    /// way; an admission ends a realm block with a fresh read.
    fn realm(&mut self, verdict: RealmVerdict) {
        let blocked_by_realm = matches!(
            self.blocked_reason(),
            Some(Reason::RealmConflict | Reason::RealmNotAuthorized)
        );
        match verdict.refusal() {
            None if blocked_by_realm => {
                *self.next_reconciliation() = None;
                self.start_read();
            }
            None => {}
            Some(_) if self.holds_work() => {}
            Some(reason) => self.block(reason, REALM_REFUSED),
        }
    }

    // ----- timers -----------------------------------------------------------

    /// The next instant a timer of this status fires, unless the step
    /// already asked for one.
    fn requeue(&mut self) {
        if self.effects().iter().any(Self::is_requeue) {
            return;
        }
        let suspended = self.phase() == Some(Self::SUSPENDED);
        let at = super::next_timer(self.claim_ref(), suspended, self.next_reconciliation_ref());
        if let Some(at) = at {
            self.effects().push(Shared::RequeueAt(at).into());
        }
    }
}

/// What moved that a claim may have been computed from.
pub enum InputMove {
    /// `metadata.generation`.
    Generation,
    /// The execution components.
    Execution(crate::api::status::ExecutionBinding),
}

/// What a family fills into a new claim beyond the common inputs.
pub struct ClaimExtras<'a> {
    /// The execution epoch it runs under.
    pub execution_epoch: Option<String>,
    /// The plan an Apply runs.
    pub plan_fingerprint: Option<&'a str>,
    /// The database realm's coordination digest.
    pub coordination_digest: Option<String>,
    /// The database an earlier operation read.
    pub target_identity_digest: Option<String>,
}

/// Implements [`Machinery`]'s types, constants and accessors on a family's
/// `Machine` by the names both families share (status fields, phases and
/// condition types).
macro_rules! machinery {
    (
        resource: $res:ident,
        phase: $phase:ident,
        cond: $cond:ident,
        effect: $fx:ident,
        owner: $owner:expr,
        answers_in: $answers:expr,
    ) => {
        type Phase = $phase;
        type Cond = $cond;
        type Effect = $fx;
        const OWNER: $crate::protocol::naming::OwnerKind = $owner;
        const PENDING: $phase = <$phase>::Pending;
        const FAILED: $phase = <$phase>::Failed;
        const BLOCKED: $phase = <$phase>::Blocked;
        const SUSPENDED: $phase = <$phase>::Suspended;
        const VERIFYING: $phase = <$phase>::Verifying;
        const RESOLVING: $phase = <$phase>::Resolving;
        const ANSWERS_IN: &'static [$phase] = $answers;
        const KSTATUS: ($cond, $cond, $cond) = ($cond::Ready, $cond::Reconciling, $cond::Stalled);
        const RECONCILIATION_FAILED: $cond = $cond::ReconciliationFailed;
        const ARTIFACT_VERIFIED: $cond = $cond::ArtifactVerified;
        const ARTIFACT_RESOLVED: $cond = $cond::ArtifactResolved;
        fn now(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
            self.now
        }
        fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &self.$res.metadata
        }
        fn spec_common(&self) -> $crate::lifecycle::common::SpecCommon<'_> {
            let spec = &self.$res.spec;
            $crate::lifecycle::common::SpecCommon {
                interval: &spec.interval,
                failure_retry_interval: &spec.execution.failure_retry_interval,
                source_kind: spec.source.kind(),
                verified: spec.source.verified(),
                suspend: spec.suspend,
            }
        }
        fn phase(&self) -> Option<$phase> {
            self.st.phase
        }
        fn conditions(&self) -> &[$crate::api::condition::Condition<$cond>] {
            &self.st.conditions
        }
        fn conditions_mut(&mut self) -> &mut Vec<$crate::api::condition::Condition<$cond>> {
            &mut self.st.conditions
        }
        fn claim_ref(&self) -> Option<&$crate::api::status::ActiveOperation> {
            self.st.active_operation.as_ref()
        }
        fn claim_slot(&mut self) -> &mut Option<$crate::api::status::ActiveOperation> {
            &mut self.st.active_operation
        }
        fn source_status(&self) -> Option<&$crate::api::source::SourceStatus> {
            self.st.source.as_ref()
        }
        fn source_status_mut(&mut self) -> Option<&mut $crate::api::source::SourceStatus> {
            self.st.source.as_mut()
        }
        fn source_slot(&mut self) -> &mut Option<$crate::api::source::SourceStatus> {
            &mut self.st.source
        }
        fn next_reconciliation(
            &mut self,
        ) -> &mut Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
            &mut self.st.next_reconciliation_time
        }
        fn next_reconciliation_ref(
            &self,
        ) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
            self.st.next_reconciliation_time.as_ref()
        }
        fn last_attempt(
            &mut self,
        ) -> &mut Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
            &mut self.st.last_attempt_time
        }
        fn last_read_request(&mut self) -> &mut Option<String> {
            &mut self.st.last_read_request
        }
        fn effects(&mut self) -> &mut Vec<$fx> {
            &mut self.fx
        }
        fn plan_identity(&self) -> Option<(&str, &str, &str)> {
            let p = self.st.plan.as_ref()?;
            Some((p.name.as_str(), p.uid.as_str(), p.fingerprint.as_str()))
        }
        fn journal_slots(
            &mut self,
        ) -> (
            &mut Vec<$crate::api::journal::JournalEntry>,
            &mut Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
        ) {
            (&mut self.st.journal, &mut self.st.covered_since)
        }
        fn is_requeue(e: &$fx) -> bool {
            matches!(e, $fx::RequeueAt(_))
        }
    };
}
pub(crate) use machinery;
