//! The proof: the read-only Observe and Plan an Apply owes, under the
//! Apply's Lease, and what its verdict settles.

use super::*;

impl Machine<'_> {
    /// The owed proof lost the Apply's Lease (its interval lapsed or another
    /// holder took it): reading under that epoch again could never keep
    /// continuity, so the next proof's Plan takes a Lease of its own.
    pub(super) fn forget_proof_lease(&mut self) {
        if let Some(p) = self.st.pending_observation.as_mut() {
            p.lease_epoch = None;
            p.lease_duration_seconds = None;
        }
    }

    /// The proof's Observe, under the Apply's Lease.
    pub(super) fn start_proof(&mut self) {
        let Some(p) = self.st.pending_observation.clone() else {
            return;
        };
        let mut claim = self.new_claim(OperationType::Observe, p.source.clone());
        claim.target_identity_digest = p.target_identity_digest.clone();
        claim.lease_epoch = p.lease_epoch.clone();
        claim.lease_duration_seconds = p.lease_duration_seconds;
        self.claim(claim);
        self.settle(
            SchemaPhase::VerifyingConvergence,
            Reason::VerifyingConvergence,
            "",
        );
    }

    /// A newer generation, policy or execution binding took over the proof.
    pub(super) fn supersede_proof(&mut self) {
        let Some(p) = self.st.pending_observation.take() else {
            return;
        };
        if let Some(c) = self.st.active_operation.take() {
            self.stage_release(&c.operation_id, c.lease_epoch, c.lease_duration_seconds);
        } else {
            self.stage_release(
                &p.apply_operation_id,
                p.lease_epoch.clone(),
                p.lease_duration_seconds,
            );
        }
        let mut e = JournalEntry::new(JournalEntryType::Verified, self.now.clone());
        e.operation_id = Some(p.apply_operation_id.clone());
        e.plan_name = Some(p.plan_name.clone());
        e.plan_uid = Some(p.plan_uid.clone());
        e.plan_fingerprint = Some(p.plan_fingerprint.clone());
        e.outcome = Some(JournalOutcome::Superseded);
        e.reason = Some(Reason::ProofInputsChanged);
        self.journal(e);
        self.event(
            false,
            Reason::ProofInputsChanged,
            "a newer input took over the proof",
        );
    }

    /// The proof read another target: Blocked, claim and Lease kept; only its
    /// own read runs again, after failureRetryInterval.
    pub(super) fn target_moved_in_proof(&mut self, mut claim: ActiveOperation) {
        claim.type_ = OperationType::Observe;
        claim.dispatch_started = false;
        claim.job_uid = None;
        claim.retry_not_before = Some(common::plus(self.now, self.retry_interval()));
        self.st.active_operation = Some(claim);
        self.block(
            Reason::TargetIdentityChanged,
            "the proof read another database than the plan's",
        );
    }

    /// The proof found nothing to change: the Apply is confirmed. Returns the
    /// `InSync` reason.
    pub(super) fn proof_converged(&mut self, identity: Option<String>) -> Reason {
        let Some(p) = self.st.pending_observation.take() else {
            return Reason::ScopedConverged;
        };
        let reason = match p.outcome {
            ApplyOutcome::ApplySucceeded => Reason::ScopedConverged,
            ApplyOutcome::OutcomeUnknown => Reason::ConvergedAfterUnknownOutcome,
        };
        let plan = self.st.plan.take();
        self.st.applied = Some(AppliedStatus {
            operation_id: p.apply_operation_id.clone(),
            plan_name: p.plan_name.clone(),
            plan_uid: p.plan_uid.clone(),
            plan_fingerprint: p.plan_fingerprint.clone(),
            source: p.source.clone(),
            source_revision: self.st.source.as_ref().map(|s| s.revision.clone()),
            coordination_digest: p.coordination_digest.clone(),
            target_identity_digest: identity.or(p.target_identity_digest.clone()),
            execution_binding: self.st.execution_binding.clone(),
            authorization: plan.as_ref().map(|pl| {
                if pl.approval.is_some() {
                    Authorization::Approval
                } else {
                    Authorization::Policy
                }
            }),
            approval: plan.and_then(|pl| pl.approval),
            job_name: p.apply_job_name.clone(),
            job_uid: p.apply_job_uid.clone(),
            started_at: None,
            completed_at: self.now.clone(),
        });
        let mut e = JournalEntry::new(JournalEntryType::Verified, self.now.clone());
        e.operation_id = Some(p.apply_operation_id.clone());
        e.plan_name = Some(p.plan_name.clone());
        e.plan_uid = Some(p.plan_uid.clone());
        e.plan_fingerprint = Some(p.plan_fingerprint.clone());
        e.outcome = Some(JournalOutcome::InSync);
        e.reason = Some(reason);
        self.journal(e);
        self.cond(C::Applying, ConditionStatus::False, reason, "");
        reason
    }

    pub(super) fn proof_drift_remains(&mut self) {
        let Some(p) = self.st.pending_observation.take() else {
            return;
        };
        // The plan the Apply ran is carried out: it is no longer current.
        if self.st.plan.as_ref().is_some_and(|pl| pl.uid == p.plan_uid) {
            self.st.plan = None;
        }
        let mut e = JournalEntry::new(JournalEntryType::Verified, self.now.clone());
        e.operation_id = Some(p.apply_operation_id.clone());
        e.plan_name = Some(p.plan_name.clone());
        e.plan_uid = Some(p.plan_uid.clone());
        e.plan_fingerprint = Some(p.plan_fingerprint.clone());
        e.outcome = Some(JournalOutcome::DriftRemains);
        e.reason = Some(Reason::ScopedChanges);
        self.journal(e);
        self.cond(
            C::Applying,
            ConditionStatus::False,
            Reason::ScopedChanges,
            "",
        );
    }
}
