//! The Apply: an approval of the current plan, its claim, the realm Lease,
//! and how the Apply ended, which a proof must confirm.

use super::*;

impl Machine<'_> {
    pub(super) fn approval_exists(&mut self, seen: &ApprovalSeen) {
        if self.phase() != Some(SchemaPhase::AwaitingApproval) || self.st.active_operation.is_some()
        {
            return;
        }
        let current = self
            .st
            .plan
            .as_ref()
            .is_some_and(|p| p.uid == seen.plan_uid && p.fingerprint == seen.plan_fingerprint);
        if !current || self.schema.spec.suspend || self.approval_spent(&seen.uid) {
            return;
        }
        self.claim_apply(Some(seen));
    }

    /// An Apply already spent the approval: the journal says so, or what the
    /// last confirmed Apply ran.
    fn approval_spent(&self, uid: &str) -> bool {
        common::spent_in(&self.st.journal, uid)
            || self
                .st
                .applied
                .as_ref()
                .and_then(|a| a.approval.as_ref())
                .is_some_and(|a| a.uid == uid)
    }

    /// Claims the Apply of the current plan: every gate holds.
    pub(super) fn claim_apply(&mut self, approval: Option<&ApprovalSeen>) {
        let Some(c) = self.apply_claim(approval) else {
            return;
        };
        if let (Some(a), Some(p)) = (approval, self.st.plan.as_mut()) {
            p.approval = Some(ConsumedApproval {
                name: a.name.clone(),
                uid: a.uid.clone(),
                approver: a.approver.clone(),
                approved_at: a.approved_at.clone(),
            });
        }
        self.claim(c);
        self.cond(C::Applying, ConditionStatus::True, Reason::ApplyPending, "");
        self.settle(SchemaPhase::Applying, Reason::OperationInProgress, "");
    }

    pub(super) fn lease_acquired(&mut self, epoch: &str, secs: i32) {
        let Some(mut c) = self.st.active_operation.clone() else {
            return;
        };
        if c.dispatch_started || c.lease_epoch.is_some() {
            return;
        }
        c.lease_epoch = Some(epoch.to_owned());
        c.lease_duration_seconds = Some(secs);
        if c.type_ == OperationType::Apply {
            self.spend_approval(&c);
            self.cond(C::Applying, ConditionStatus::True, Reason::Active, "");
        }
        c.dispatch_started = true;
        self.fx.push(Effect::StartJob {
            operation: c.type_,
            job_name: c.job_name.clone().unwrap_or_default(),
        });
        self.st.active_operation = Some(c);
    }

    pub(super) fn lease_lost(&mut self) {
        let Some(c) = self.st.active_operation.clone() else {
            return;
        };
        match c.type_ {
            // A dispatched Apply is followed to its end whatever the Lease
            // says; an undispatched one waits for the Lease.
            OperationType::Apply if !c.dispatch_started => self.waits_for_lease(c.type_),
            OperationType::Apply => {}
            _ if self.proof_owed() => {
                self.st.active_operation = None;
                self.forget_proof_lease();
                self.fx.push(Effect::RequeueAt(self.now.clone()));
                self.settle(SchemaPhase::Pending, Reason::LeaseContinuityLost, "");
            }
            OperationType::Plan if c.lease_epoch.is_some() => {
                self.drop_claim();
                self.start_observe(false);
            }
            OperationType::Plan => self.waits_for_lease(c.type_),
            _ => {}
        }
    }

    /// An Apply Job ended or was lost: the read-only proof comes next, never a
    /// replay.
    pub(super) fn apply_ended(&mut self, reported_success: bool, job_uid: Option<String>) {
        let Some(c) = self.st.active_operation.take() else {
            return;
        };
        let outcome = if reported_success {
            ApplyOutcome::ApplySucceeded
        } else {
            ApplyOutcome::OutcomeUnknown
        };
        let job_uid = job_uid.or(c.job_uid.clone());
        self.st.pending_observation = Some(PendingObservation {
            outcome,
            apply_operation_id: c.operation_id.clone(),
            apply_job_name: c.job_name.clone(),
            apply_job_uid: job_uid.clone(),
            apply_generation: self.generation(),
            observe_after: None,
            plan_name: c.plan_name.clone().unwrap_or_default(),
            plan_uid: c.plan_uid.clone().unwrap_or_default(),
            plan_fingerprint: c.plan_fingerprint.clone().unwrap_or_default(),
            source: c.source.clone(),
            coordination_digest: c.coordination_digest.clone(),
            target_identity_digest: c.target_identity_digest.clone(),
            lease_epoch: c.lease_epoch.clone(),
            lease_duration_seconds: c.lease_duration_seconds,
            recorded_at: self.now.clone(),
        });
        let mut e = common::apply_entry(JournalEntryType::ApplyFinished, &c, self.now);
        e.job_uid = job_uid;
        e.outcome = Some(if reported_success {
            JournalOutcome::Succeeded
        } else {
            JournalOutcome::Unknown
        });
        e.reason = Some(if reported_success {
            Reason::JobCompleted
        } else {
            Reason::ApplyOutcomeUnknown
        });
        self.journal(e);
        if !reported_success {
            self.event(
                true,
                Reason::ApplyOutcomeUnknown,
                "the Apply's outcome is unknown: a fresh read comes next",
            );
        }
        self.cond(
            C::Applying,
            ConditionStatus::False,
            Reason::JobCompleted,
            "",
        );
        if self.schema.spec.suspend {
            self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
        } else {
            self.start_proof();
        }
    }

    pub(super) fn settled_apply(&mut self) {
        if self.blocked_reason() != Some(Reason::TargetIdentityChanged) {
            return;
        }
        let Some(p) = self.st.pending_observation.clone() else {
            return;
        };
        if self.annotation(SETTLED_APPLY) != Some(p.apply_operation_id.as_str()) {
            return;
        }
        self.st.pending_observation = None;
        if let Some(c) = self.st.active_operation.take() {
            self.stage_release(&c.operation_id, c.lease_epoch, c.lease_duration_seconds);
        }
        let mut e = JournalEntry::new(JournalEntryType::Verified, self.now.clone());
        e.operation_id = Some(p.apply_operation_id.clone());
        e.plan_name = Some(p.plan_name.clone());
        e.plan_uid = Some(p.plan_uid.clone());
        e.plan_fingerprint = Some(p.plan_fingerprint.clone());
        e.outcome = Some(JournalOutcome::Unknown);
        e.reason = Some(Reason::TargetIdentityChanged);
        self.journal(e);
        self.fx.push(Effect::RequeueAt(self.now.clone()));
        self.settle(
            SchemaPhase::Pending,
            Reason::Requested,
            "a person settled the Apply",
        );
    }
}
