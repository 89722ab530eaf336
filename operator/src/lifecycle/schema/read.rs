//! The read: a source resolved or changed, the drift an Observe found, and
//! what a Plan's verdict asks (no change, a plan to approve or to apply).

use super::*;

impl Machine<'_> {
    pub(super) fn snapshot_taken(&mut self, src: &SourceStatus) {
        let changed = self
            .st
            .source
            .as_ref()
            .is_none_or(|old| !common::same_source(old, src));
        match self.st.active_operation.as_ref() {
            // An Apply under way, or a proof, stays bound to what it ran from.
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => return,
            Some(_) if self.proof_owed() => return,
            Some(c) if c.type_ == OperationType::Apply => {
                if !changed {
                    return;
                }
                self.drop_claim();
            }
            Some(_) => {
                if !changed {
                    return;
                }
                self.discard_read();
                self.st.source = Some(src.clone());
                self.retire_plan(Reason::PlanNoLongerCurrent);
                return;
            }
            None => {
                let idle_verdict = matches!(
                    self.phase(),
                    Some(
                        SchemaPhase::InSync
                            | SchemaPhase::Blocked
                            | SchemaPhase::ReadyToApply
                            | SchemaPhase::AwaitingApproval
                            | SchemaPhase::Failed
                    )
                );
                let due = self.due(self.st.next_reconciliation_time.as_ref());
                if !changed && idle_verdict && !due {
                    // An edit of an unselected key: same snapshot, same plan.
                    return;
                }
            }
        }
        if changed {
            self.retire_plan(Reason::PlanNoLongerCurrent);
        }
        self.st.source = Some(src.clone());
        self.cond(
            C::ArtifactResolved,
            ConditionStatus::True,
            Reason::SnapshotTaken,
            &src.revision,
        );
        self.start_observe(false);
    }

    pub(super) fn source_changed(&mut self) {
        if self.source_kind() == Some(SourceKind::ConfigMap) {
            // The snapshot decides whether the selected files moved.
            self.fx.push(Effect::TakeSnapshot);
            return;
        }
        // A source policy replaced, or Flux's new artifact: resolve again,
        // and the plan made under the old one retires.
        let reason = if self.source_kind() == Some(SourceKind::Flux) {
            Reason::PlanNoLongerCurrent
        } else {
            Reason::PolicyChanged
        };
        match self.st.active_operation.as_ref() {
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => {}
            Some(_) if self.proof_owed() => {}
            Some(c) if c.type_ == OperationType::Apply => {
                self.drop_claim();
                self.retire_plan(reason);
                self.settle(SchemaPhase::Pending, Reason::InputsChanged, "");
            }
            Some(_) => {
                self.retire_plan(reason);
                self.discard_read();
            }
            None => {
                if self
                    .blocked_reason()
                    .is_some_and(read_request::blocked_reason_waits)
                {
                    return;
                }
                self.retire_plan(reason);
                self.start_read();
            }
        }
    }

    pub(super) fn verification_policy_changed(&mut self) {
        if !self.spec_common().verified
            || self.blocked_reason() == Some(Reason::TargetIdentityChanged)
        {
            return;
        }
        if self.proof_claim() || (self.proof_owed() && self.st.active_operation.is_none()) {
            self.supersede_proof();
            self.retire_plan(Reason::PolicyChanged);
            if self.st.source.is_some() {
                self.start_verify();
            }
            return;
        }
        match self.st.active_operation.as_ref() {
            Some(c) if c.type_ == OperationType::Apply && c.dispatch_started => {}
            Some(c) if c.type_ == OperationType::Apply => {
                self.drop_claim();
                self.retire_plan(Reason::PolicyChanged);
                self.start_verify();
            }
            Some(_) => {
                self.retire_plan(Reason::PolicyChanged);
                self.discard_read();
            }
            None => {
                self.retire_plan(Reason::PolicyChanged);
                if self.st.source.is_some() {
                    self.start_verify();
                } else {
                    self.start_read();
                }
            }
        }
    }

    pub(super) fn drift_observed(&mut self, target: &TargetStatus) {
        let Some(claim) = self.st.active_operation.clone() else {
            return;
        };
        if claim.type_ != OperationType::Observe {
            return;
        }
        if self.proof_owed() {
            let planned = self
                .st
                .pending_observation
                .as_ref()
                .and_then(|p| p.target_identity_digest.clone());
            if planned.is_some()
                && target.identity_digest.is_some()
                && planned != target.identity_digest
            {
                self.target_moved_in_proof(claim);
                return;
            }
        }
        let count = target.drift_finding_count.unwrap_or(0);
        self.st.target = Some(TargetStatus {
            last_observed_at: target
                .last_observed_at
                .clone()
                .or_else(|| Some(self.now.clone())),
            ..target.clone()
        });
        let (s, r) = if count > 0 {
            (ConditionStatus::True, Reason::ScopedChanges)
        } else {
            (ConditionStatus::False, Reason::Observed)
        };
        self.cond(C::DriftDetected, s, r, "");
        if self.proof_owed() && self.schema.spec.suspend {
            // The proof's Job ran to its end; the next one waits for the
            // resume, with the proof owed and its Lease kept.
            self.st.active_operation = None;
            self.settle(SchemaPhase::Suspended, Reason::Suspended, "spec.suspend");
            return;
        }
        let mut plan = self.new_claim(OperationType::Plan, claim.source.clone());
        if self.proof_owed() {
            plan.target_identity_digest = claim.target_identity_digest.clone();
            plan.lease_epoch = claim.lease_epoch.clone();
            plan.lease_duration_seconds = claim.lease_duration_seconds;
            self.claim(plan);
            self.settle(
                SchemaPhase::VerifyingConvergence,
                Reason::VerifyingConvergence,
                "",
            );
        } else {
            self.claim(plan);
            self.settle(SchemaPhase::Planning, Reason::OperationInProgress, "");
        }
    }

    pub(super) fn planned(&mut self, verdict: &PlanVerdict) {
        let Some(claim) = self.st.active_operation.clone() else {
            return;
        };
        if claim.type_ != OperationType::Plan {
            return;
        }
        let proof = self.proof_owed();
        let verdict = if claim.lease_continuity_lost {
            &PlanVerdict::LockLost
        } else {
            verdict
        };
        match verdict {
            PlanVerdict::TargetMoved if proof => self.target_moved_in_proof(claim),
            PlanVerdict::LockLost if proof => {
                // The proof's result is discarded; it is owed again next pass,
                // under a Lease of its own: the Apply's interval is over.
                self.st.active_operation = None;
                self.forget_proof_lease();
                self.event(
                    true,
                    Reason::LeaseContinuityLost,
                    "the proof's result was discarded",
                );
                self.fx.push(Effect::RequeueAt(self.now.clone()));
                self.settle(SchemaPhase::Pending, Reason::LeaseContinuityLost, "");
            }
            PlanVerdict::TargetMoved | PlanVerdict::LockLost => {
                let reason = if matches!(verdict, PlanVerdict::LockLost) {
                    Reason::LeaseContinuityLost
                } else {
                    Reason::StaleObservation
                };
                self.drop_claim();
                self.event(false, reason, "planning again from a fresh observation");
                self.start_observe(false);
            }
            PlanVerdict::NoChange {
                target_identity_digest,
            } => {
                self.drop_claim_after_plan(&claim);
                let reason = if proof {
                    self.proof_converged(target_identity_digest.clone())
                } else {
                    self.retire_plan(Reason::NoChanges);
                    Reason::ScopedConverged
                };
                self.in_sync(reason);
            }
            PlanVerdict::Changes {
                plan,
                protected_table,
                destructive_statement,
                ..
            } => {
                self.drop_claim_after_plan(&claim);
                if proof {
                    self.proof_drift_remains();
                }
                self.verdict(
                    plan,
                    protected_table.as_deref(),
                    destructive_statement.as_deref(),
                );
            }
        }
    }

    pub(super) fn drop_claim_after_plan(&mut self, claim: &ActiveOperation) {
        self.st.active_operation = None;
        let (id, epoch, secs) = match &self.st.pending_observation {
            Some(p) => (
                p.apply_operation_id.clone(),
                p.lease_epoch.clone(),
                p.lease_duration_seconds,
            ),
            None => (
                claim.operation_id.clone(),
                claim.lease_epoch.clone(),
                claim.lease_duration_seconds,
            ),
        };
        self.stage_release(&id, epoch, secs);
    }

    /// A plan's verdict, as from Planning.
    pub(super) fn verdict(
        &mut self,
        plan: &SchemaPlanSummary,
        protected_table: Option<&str>,
        destructive_statement: Option<&str>,
    ) {
        let policy = &self.schema.spec.policy;
        let privilege = !plan.privilege_changes.is_empty();
        let automatic = policy::automatic(policy, plan.destructive, privilege);
        let mut plan = plan.clone();
        plan.approval_required = policy.apply != ApplyPolicy::Never && !automatic;
        let same = self
            .st
            .plan
            .as_ref()
            .is_some_and(|old| old.uid == plan.uid && old.fingerprint == plan.fingerprint);
        if same {
            // Republished while refreshing: the same plan, and any approval it has.
            if let Some(old) = self.st.plan.as_ref() {
                plan.approval = old.approval.clone();
            }
        } else {
            let retired = self.retire_plan(Reason::PlanStale);
            let replaced = retired
                .filter(|r| r.approval_required || r.approval.is_some())
                .map(|r| r.name)
                .or_else(|| self.unrun_published_plan(&plan.uid));
            self.st.plan = Some(plan.clone());
            let identity = (
                plan.name.as_str(),
                plan.uid.as_str(),
                plan.fingerprint.as_str(),
            );
            // Written for a plan the journal does not hold yet: the same plan
            // published again (the database back where it started) writes
            // nothing, as for a migration.
            let held = self.st.journal.iter().any(|e| {
                e.type_ == JournalEntryType::PlanPublished
                    && e.plan_uid.as_deref() == Some(&plan.uid)
            });
            if !held {
                let mut e = common::plan_published(identity, plan.created_at.as_ref(), self.now);
                e.approval_required = Some(plan.approval_required);
                e.replaced = replaced;
                self.journal(e);
            }
            self.fx.push(Effect::PublishPlan {
                name: plan.name.clone(),
            });
            self.event(
                false,
                Reason::Published,
                format!("plan {} published", plan.name),
            );
        }
        self.st.plan = Some(plan.clone());
        self.cond(C::InSync, ConditionStatus::False, Reason::ScopedChanges, "");
        self.cond(
            C::PlanReady,
            ConditionStatus::True,
            Reason::PlanReady,
            &plan.name,
        );
        self.cond(
            C::ReconciliationFailed,
            ConditionStatus::False,
            Reason::Succeeded,
            "",
        );
        let name = self.schema.metadata.name.as_deref().unwrap_or_default();
        let see = format!("`kubectl ptah plan ptahschema/{name}` shows its statements");
        let blocked = policy::hold(
            policy,
            &format!("plan {}", plan.name),
            plan.destructive,
            protected_table,
            destructive_statement,
            &see,
        );
        if let Some((reason, message)) = blocked {
            self.cond(
                C::ApprovalRequired,
                ConditionStatus::False,
                reason,
                &message,
            );
            self.block(reason, &message);
        } else if automatic {
            self.cond(
                C::ApprovalRequired,
                ConditionStatus::False,
                Reason::NotRequired,
                "",
            );
            self.settle(SchemaPhase::ReadyToApply, Reason::ApplyPending, "");
            self.schedule_interval();
            self.fx.push(Effect::RequeueAt(self.now.clone()));
        } else {
            let reason = if privilege {
                Reason::PrivilegeChanges
            } else {
                Reason::AwaitingApproval
            };
            self.cond(
                C::ApprovalRequired,
                ConditionStatus::True,
                reason,
                &plan.name,
            );
            let waits = format!("plan {} waits for an approval", plan.name);
            self.settle(
                SchemaPhase::AwaitingApproval,
                Reason::AwaitingApproval,
                &waits,
            );
            self.schedule_interval();
        }
    }

    /// The plan the journal's newest `PlanPublished` names, when a person could
    /// approve it or had approved it and it never ran: a plan retired by a
    /// stale input before this one was computed.
    pub(super) fn unrun_published_plan(&self, new_uid: &str) -> Option<String> {
        let journal = &self.st.journal;
        let i = journal
            .iter()
            .rposition(|e| e.type_ == JournalEntryType::PlanPublished)?;
        let published = &journal[i];
        let uid = published.plan_uid.as_deref()?;
        if uid == new_uid {
            return None;
        }
        let later = &journal[i + 1..];
        let ran = later.iter().any(|e| {
            e.plan_uid.as_deref() == Some(uid)
                && matches!(
                    e.type_,
                    JournalEntryType::ApplyFinished | JournalEntryType::Verified
                )
        });
        let approved = later.iter().any(|e| {
            e.type_ == JournalEntryType::ApprovalAccepted && e.plan_uid.as_deref() == Some(uid)
        });
        let approvable = published.approval_required == Some(true) || approved;
        (approvable && !ran)
            .then(|| published.plan_name.clone())
            .flatten()
    }
}
