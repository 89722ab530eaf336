//! One pass over a PtahMigration: read what changed, step the pure machine
//! (`lifecycle::migration`) once per observation, and perform its effects
//! around each status write — the unresolved-run annotation copy before the
//! status that sets the hold, everything else after. The I/O is the shared
//! [`super::runtime`]; only what a migration has of its own is here:
//! History and Run results, sequence plans, approvals of them and
//! acknowledgments of unresolved runs.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::harvest::{self, SourceRead};
use super::migration_harvest::{run_report, verdict};
use super::runtime::{self, ClaimJob, Dispatch, GenerationMove, InputChange, Requeue, Snapshot};
use super::{Context, Error, FaultPoint, kube_err, migration_dispatch};
use crate::api::annotations::{MIGRATION_FINALIZER, UNRESOLVED_RUN};
use crate::api::approval::{PtahMigrationApproval, PtahMigrationRunAcknowledgment};
use crate::api::condition::{ApprovalConditionType, MigrationPhase, Reason};
use crate::api::migration::{PtahMigration, PtahMigrationStatus};
use crate::api::status::{ActiveOperation, Authorization, OperationType};
use crate::execution::migration_plan::{self, PlanRequest};
use crate::lifecycle::migration::{
    AcknowledgmentSeen, ApprovalSeen, Effect, Observation, engine_supported, step,
};
use crate::lifecycle::realm;
use crate::protocol::migrations::{check_history, check_run};
use crate::protocol::result::StepOutput;

/// How many steps one pass takes at most; the rest waits for the next pass.
const MAX_STEPS: usize = 24;

/// The reconcile function of the PtahMigration controller.
pub async fn reconcile(obj: Arc<PtahMigration>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<PtahMigration> = Api::namespaced(ctx.client.clone(), &ns);
    // The watch cache can trail our own writes: decide on the object as stored.
    let Some(current) = api
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading PtahMigration {ns}/{name}")))?
    else {
        return Ok(Action::await_change());
    };
    let mut pass = Pass {
        ctx: &ctx,
        api,
        ns,
        obj: current,
        requeue: Requeue::default(),
        harvested: None,
        plans_moved: false,
        snapshot_taken: false,
    };
    pass.run().await
}

struct Pass<'a> {
    ctx: &'a Context,
    api: Api<PtahMigration>,
    ns: String,
    obj: PtahMigration,
    requeue: Requeue,
    /// This pass read the outcome of a Job of this operation.
    harvested: Option<OperationType>,
    /// This pass published or retired a plan.
    plans_moved: bool,
    snapshot_taken: bool,
}

impl Pass<'_> {
    fn name(&self) -> String {
        self.obj.name_any()
    }

    fn status(&self) -> PtahMigrationStatus {
        self.obj.status.clone().unwrap_or_default()
    }

    fn uid(&self) -> String {
        self.obj.metadata.uid.clone().unwrap_or_default()
    }

    async fn run(&mut self) -> Result<Action, Error> {
        if self.obj.metadata.deletion_timestamp.is_some() {
            return self.finalize().await;
        }
        if let Some(release) = self.status().pending_lock_release {
            self.ctx.leases.release(&release).await?;
            self.edit_status(|st| {
                if st.pending_lock_release.as_ref() == Some(&release) {
                    st.pending_lock_release = None;
                }
            })
            .await?;
        }
        let mut queue: VecDeque<Observation> = self.gather().await?.into();
        queue.push_back(Observation::Pass);
        let mut steps = 0;
        while let Some(o) = queue.pop_front() {
            steps += 1;
            if steps > MAX_STEPS {
                self.requeue.within(Duration::ZERO);
                break;
            }
            let follow = self.step(&o).await?;
            for f in follow.into_iter().rev() {
                queue.push_front(f);
            }
        }
        self.cleanup().await?;
        let want = self.in_flight();
        if let Some(stored) =
            runtime::set_finalizer(&self.api, &self.obj, MIGRATION_FINALIZER, want).await?
        {
            self.obj = stored;
        }
        let claim = self.status().active_operation;
        Ok(std::mem::take(&mut self.requeue).action(claim.as_ref()))
    }

    // ----- stepping ---------------------------------------------------------

    async fn step(&mut self, o: &Observation) -> Result<Vec<Observation>, Error> {
        if self
            .obj
            .status
            .as_ref()
            .and_then(|s| s.execution_binding.as_ref())
            .is_none()
        {
            let binding = self.ctx.config.execution.clone();
            self.obj
                .status
                .get_or_insert_with(Default::default)
                .execution_binding = Some(binding);
        }
        let stepped = step(&self.obj, o, &runtime::now());
        tracing::debug!(migration = %self.name(), observation = ?o, phase = ?stepped.status.phase, "step");
        // The hold's copy goes on the object before the status that sets it,
        // so a restore that drops status still holds the resource.
        for e in stepped.before_status() {
            if let Effect::WriteUnresolvedAnnotation(run) = e {
                let copy = crate::lifecycle::migration::annotation_copy(run).map_err(|e| {
                    Error::NotStored(format!("{}: the unresolved run: {e}", self.name()))
                })?;
                self.annotate(Some(copy)).await?;
            }
        }
        self.write(stepped.status.clone()).await?;
        let after: Vec<Effect> = stepped.after_status().cloned().collect();
        self.perform(after).await
    }

    async fn write(&mut self, status: PtahMigrationStatus) -> Result<(), Error> {
        if self.obj.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut next = self.obj.clone();
        next.status = Some(status);
        self.obj = runtime::write_status(&self.api, &next).await?;
        Ok(())
    }

    async fn edit_status(&mut self, f: impl FnOnce(&mut PtahMigrationStatus)) -> Result<(), Error> {
        let mut st = self.status();
        f(&mut st);
        self.write(st).await
    }

    /// Sets or removes the annotation copy of the unresolved run.
    async fn annotate(&mut self, value: Option<String>) -> Result<(), Error> {
        if self.obj.annotations().get(UNRESOLVED_RUN) == value.as_ref() {
            return Ok(());
        }
        let patch = serde_json::json!({"metadata": {"annotations": {UNRESOLVED_RUN: value}}});
        let stored = self
            .api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "writing the unresolved-run copy of {}",
                self.name()
            )))?;
        // Keep the status as this pass knows it; only metadata moved.
        self.obj.metadata = stored.metadata;
        Ok(())
    }

    // ----- what changed -----------------------------------------------------

    async fn gather(&mut self) -> Result<Vec<Observation>, Error> {
        let mut obs = Vec::new();
        let st = self.status();
        if !engine_supported(&self.obj) {
            obs.push(Observation::EngineUnsupported);
        } else {
            let me = realm::claimant_of_migration(&self.obj);
            obs.push(Observation::Realm(runtime::census(self.ctx, me).await?));
        }
        match runtime::generation_move(
            st.observed_generation,
            st.observed_spec_digest.as_deref(),
            self.obj.metadata.generation,
            &self.obj.spec,
        ) {
            Some(GenerationMove::SuspendOnly) => obs.push(Observation::SuspendChanged),
            Some(GenerationMove::Spec) => obs.push(Observation::GenerationMoved),
            None => {}
        }
        if let Some(recorded) = &st.execution_binding
            && *recorded != self.ctx.config.execution
        {
            obs.push(Observation::ExecutionBindingChanged(
                self.ctx.config.execution.clone(),
            ));
        }
        let waiting = self.obj.spec.suspend
            || matches!(
                st.phase,
                Some(MigrationPhase::Suspended | MigrationPhase::Blocked)
            ) && st.active_operation.is_none()
                && st.unresolved_run.is_some();
        if let (Some(recorded), false) = (&st.source, waiting) {
            let changes = runtime::input_changes(
                self.ctx,
                &self.ns,
                &self.obj.spec.source,
                recorded,
                st.active_operation.as_ref(),
            )
            .await;
            obs.extend(changes.into_iter().map(|c| match c {
                InputChange::Source => Observation::SourceChanged,
                InputChange::VerificationPolicy => Observation::VerificationPolicyChanged,
            }));
        }
        obs.extend(self.claim_observations(&st).await?);
        obs.extend(self.decisions(&st).await?);
        Ok(obs)
    }

    async fn claim_observations(
        &mut self,
        st: &PtahMigrationStatus,
    ) -> Result<Vec<Observation>, Error> {
        let Some(c) = st.active_operation.clone() else {
            return Ok(Vec::new());
        };
        if !c.dispatch_started {
            let waits_for_lease = c.type_ == OperationType::Apply
                && c.lease_epoch.is_none()
                && c.retry_not_before.is_none();
            if waits_for_lease {
                return Ok(vec![self.acquire(&c).await?]);
            }
            return Ok(Vec::new());
        }
        let mut obs = Vec::new();
        if let (Some(epoch), Some(digest)) = (&c.lease_epoch, &c.coordination_digest)
            && !c.lease_continuity_lost
            && self
                .ctx
                .leases
                .renew(digest, &c.operation_id, epoch)
                .await?
                == crate::execution::lease::Continuity::Lost
        {
            obs.push(Observation::LeaseContinuityLost);
        }
        match runtime::claim_job(self.ctx, &self.ns, &self.uid(), &c).await? {
            ClaimJob::Running(uid) => {
                if c.job_uid.is_none() {
                    self.record_job_uid(&c, uid).await?;
                }
            }
            ClaimJob::Ended(j) => {
                if c.job_uid.is_none() {
                    self.record_job_uid(&c, j.metadata.uid.clone()).await?;
                }
                obs.push(self.harvest(&c, Some(&j)).await?);
            }
            ClaimJob::Missing { stored: true } => obs.push(self.harvest(&c, None).await?),
            ClaimJob::Missing { stored: false }
                if c.job_uid.is_none() && c.type_ != OperationType::Apply =>
            {
                obs.extend(self.dispatch(&c).await?)
            }
            // A dispatched run nobody can read: never dispatched again.
            ClaimJob::Missing { .. } | ClaimJob::Foreign | ClaimJob::Unnamed => {
                obs.push(Observation::JobLost)
            }
        }
        Ok(obs)
    }

    async fn harvest(
        &mut self,
        c: &ActiveOperation,
        job: Option<&Job>,
    ) -> Result<Observation, Error> {
        let stored = runtime::stored_result(self.ctx, &self.ns, c).await?;
        self.harvested = Some(c.type_);
        let Some(r) = stored else {
            return Ok(match (c.type_, job) {
                (OperationType::Apply, _) | (_, None) => Observation::JobLost,
                (_, Some(j)) => {
                    let pod = runtime::pod_of(self.ctx, &self.ns, j).await?;
                    Observation::JobFailed {
                        reason: Reason::OperationFailed,
                        message: harvest::lost_result(j, pod.as_ref()),
                    }
                }
            });
        };
        let now = runtime::now();
        let bindings = runtime::bindings(self.ctx, &self.ns, &self.obj.spec.source).await;
        if let Some(read) = harvest::source_read(c.type_, &r.document, &bindings, &now) {
            return Ok(match read {
                SourceRead::Resolved(src) => Observation::SourceResolved(*src),
                SourceRead::Refused(message) => Observation::SourceRefused { message },
                SourceRead::Verified(e) => Observation::VerificationSatisfied(*e),
                SourceRead::VerificationRefused(message) => {
                    Observation::VerificationRefused { message }
                }
                SourceRead::PolicyChanged => Observation::VerificationPolicyChanged,
                SourceRead::Failed { reason, message } => {
                    Observation::JobFailed { reason, message }
                }
            });
        }
        Ok(match (c.type_, r.document.result.as_ref()) {
            // A document that breaks the protocol gives no verdict: the read
            // runs again, and a run is unknown.
            (OperationType::History, Some(StepOutput::History { report })) => {
                match check_history(report) {
                    Ok(()) => Observation::HistoryRead(verdict(report)),
                    Err(e) => Observation::JobFailed {
                        reason: Reason::OperationFailed,
                        message: format!("the history result is not read: {e}"),
                    },
                }
            }
            (OperationType::Apply, Some(StepOutput::Ran { outcome })) => match check_run(outcome) {
                Ok(()) => Observation::RunEnded(run_report(outcome, r.job_uid)),
                Err(_) => Observation::JobLost,
            },
            // A run whose result says nothing of what it did is unknown.
            (OperationType::Apply, _) => Observation::JobLost,
            _ => Observation::JobFailed {
                reason: Reason::OperationFailed,
                message: harvest::message_of(&r.document),
            },
        })
    }

    /// Approvals of the current plan, the one an Apply claim names, and
    /// acknowledgments of an unresolved run.
    async fn decisions(&self, st: &PtahMigrationStatus) -> Result<Vec<Observation>, Error> {
        let client = self.ctx.client.clone();
        let uid = self.uid();
        let mut obs = Vec::new();
        let approvals: Api<PtahMigrationApproval> = Api::namespaced(client.clone(), &self.ns);
        match (&st.active_operation, &st.plan) {
            (Some(c), _)
                if c.type_ == OperationType::Apply
                    && !c.dispatch_started
                    && c.authorization == Some(Authorization::Approval) =>
            {
                let gone = match &c.approval_name {
                    Some(name) => approvals
                        .get_opt(name)
                        .await
                        .map_err(kube_err(format!("reading PtahMigrationApproval {name}")))?
                        .is_none_or(|a| a.metadata.uid != c.approval_uid),
                    None => true,
                };
                if gone {
                    obs.push(Observation::ApprovalAbsent);
                }
            }
            (None, Some(plan)) if st.phase == Some(MigrationPhase::AwaitingApproval) => {
                let list = approvals
                    .list(&ListParams::default())
                    .await
                    .map_err(kube_err("listing PtahMigrationApprovals"))?;
                let found = list.items.into_iter().find(|a| {
                    a.spec.migration_ref.uid == uid
                        && a.spec.plan_ref.uid == plan.uid
                        && a.spec.plan_fingerprint == plan.fingerprint
                        && a.metadata.deletion_timestamp.is_none()
                });
                if let Some(a) = found {
                    obs.push(Observation::ApprovalExists(ApprovalSeen {
                        name: a.name_any(),
                        uid: a.metadata.uid.clone().unwrap_or_default(),
                        plan_uid: plan.uid.clone(),
                        plan_fingerprint: plan.fingerprint.clone(),
                        approver: a.spec.approver.clone(),
                        approved_at: a.spec.approved_at.clone(),
                    }));
                }
            }
            _ => {}
        }
        if let Some(run) = &st.unresolved_run {
            let acks: Api<PtahMigrationRunAcknowledgment> = Api::namespaced(client, &self.ns);
            let list = acks
                .list(&ListParams::default())
                .await
                .map_err(kube_err("listing PtahMigrationRunAcknowledgments"))?;
            // Only one admission stamped counts: it names who settled it.
            let found = list.items.into_iter().find(|a| {
                a.spec.migration_ref.uid == uid
                    && a.spec.operation_id == run.operation_id
                    && a.spec.acknowledged_by.is_some()
            });
            if let Some(a) = found {
                obs.push(Observation::Acknowledged(AcknowledgmentSeen {
                    name: a.name_any(),
                    uid: a.metadata.uid.clone().unwrap_or_default(),
                    operation_id: a.spec.operation_id.clone(),
                    acknowledged_by: a.spec.acknowledged_by.clone(),
                }));
            }
        }
        Ok(obs)
    }

    // ----- effects ----------------------------------------------------------

    async fn perform(&mut self, effects: Vec<Effect>) -> Result<Vec<Observation>, Error> {
        let mut follow = Vec::new();
        for e in effects {
            match e {
                Effect::TakeSnapshot => follow.push(self.take_snapshot().await),
                Effect::AcquireLease { .. } => {
                    if let Some(c) = self.status().active_operation {
                        follow.push(self.acquire(&c).await?);
                    }
                }
                Effect::StartJob { .. } => {
                    if let Some(c) = self.status().active_operation {
                        follow.extend(self.dispatch(&c).await?);
                    }
                }
                e @ Effect::PublishPlan { .. } => {
                    self.plans_moved = true;
                    follow.push(self.publish(&e).await?);
                }
                Effect::RetirePlan { name, reason } => {
                    self.plans_moved = true;
                    self.mark_approvals(
                        |a| a.spec.plan_ref.name == name,
                        ApprovalConditionType::Stale,
                        reason,
                    )
                    .await?;
                }
                Effect::SpendApproval { name, uid } => {
                    self.mark_approvals(
                        |a| {
                            a.metadata.name.as_deref() == Some(name.as_str())
                                && a.metadata.uid.as_deref() == Some(uid.as_str())
                        },
                        ApprovalConditionType::Consumed,
                        Reason::DispatchCommitted,
                    )
                    .await?;
                }
                Effect::ReleaseLease(release) => {
                    self.ctx.leases.release(&release).await?;
                    self.edit_status(|st| {
                        if st.pending_lock_release.as_ref() == Some(&release) {
                            st.pending_lock_release = None;
                        }
                    })
                    .await?;
                }
                // Written before the status; nothing left to do after it.
                Effect::WriteUnresolvedAnnotation(_) => {}
                Effect::ClearUnresolvedAnnotation => self.annotate(None).await?,
                Effect::Event {
                    warning,
                    reason,
                    message,
                } => runtime::event(self.ctx, &self.obj, warning, reason, message).await,
                Effect::RequeueAt(t) => self.requeue.at(t.0),
            }
        }
        Ok(follow)
    }

    async fn take_snapshot(&mut self) -> Observation {
        let src = &self.obj.spec.source;
        let taken = runtime::take_snapshot(
            self.ctx,
            &self.obj,
            src.config_map.as_ref(),
            src.source_policy_from.as_ref(),
        )
        .await;
        match taken {
            Snapshot::Taken(src) => {
                self.snapshot_taken = true;
                Observation::SnapshotTaken(*src)
            }
            Snapshot::Refused(message) => Observation::SourceRefused { message },
            Snapshot::Invalid(message) => Observation::ConfigurationError { message },
            Snapshot::Later => {
                self.requeue.within(Duration::from_secs(2));
                Observation::Pass
            }
        }
    }

    async fn acquire(&mut self, c: &ActiveOperation) -> Result<Observation, Error> {
        let Some(digest) = c.coordination_digest.clone() else {
            return Ok(Observation::ConfigurationError {
                message: "spec.target names no coordination identity".into(),
            });
        };
        let secs = self.ctx.config.lease_duration_seconds;
        Ok(
            match self
                .ctx
                .leases
                .acquire(&digest, &c.operation_id, secs)
                .await?
            {
                crate::execution::lease::Acquired::Held {
                    epoch,
                    duration_seconds,
                } => Observation::LeaseAcquired {
                    epoch,
                    duration_seconds,
                },
                crate::execution::lease::Acquired::Busy { retry_after, .. } => {
                    self.requeue.within(retry_after);
                    Observation::LeaseLost
                }
            },
        )
    }

    async fn dispatch(&mut self, c: &ActiveOperation) -> Result<Option<Observation>, Error> {
        // An Apply carries the sequence of the plan it names.
        let plan = match (&c.plan_name, &c.plan_fingerprint) {
            (Some(name), Some(fingerprint)) if c.type_ == OperationType::Apply => {
                migration_plan::read(&self.ctx.client, &self.obj, name, fingerprint)
                    .await
                    .ok()
            }
            _ => None,
        };
        let input = migration_dispatch::job_input(&self.obj, c, &self.ctx.config, plan.as_ref())
            .map_err(|e| e.to_string());
        let src = self.obj.spec.source.clone();
        Ok(
            match runtime::dispatch(self.ctx, &self.obj, &src, c, input).await? {
                Dispatch::Refused(message) => Some(Observation::SourceRefused { message }),
                Dispatch::NotBuilt { reason, message } => {
                    Some(Observation::JobNotBuilt { reason, message })
                }
                Dispatch::Created(uid) => {
                    self.record_job_uid(c, uid).await?;
                    self.ctx.fault(FaultPoint::AfterJobUid, c.type_);
                    None
                }
            },
        )
    }

    async fn record_job_uid(
        &mut self,
        c: &ActiveOperation,
        uid: Option<String>,
    ) -> Result<(), Error> {
        let (op, attempt) = (c.operation_id.clone(), c.attempt);
        self.edit_status(|st| {
            if let Some(claim) = st.active_operation.as_mut()
                && claim.operation_id == op
                && claim.attempt == attempt
            {
                claim.job_uid = uid;
            }
        })
        .await
    }

    /// Stores the sequence plan the machine asked for.
    async fn publish(&self, effect: &Effect) -> Result<Observation, Error> {
        let Some(request) = PlanRequest::from_effect(effect) else {
            return Ok(Observation::Pass);
        };
        Ok(
            match migration_plan::publish(&self.ctx.client, &self.obj, &request).await {
                Ok(published) => Observation::PlanPublished(published.summary),
                Err(e) if e.is_transient() => {
                    return Err(Error::NotStored(format!("{}: {e}", self.name())));
                }
                Err(e) => Observation::PlanNotPublished {
                    message: e.to_string(),
                },
            },
        )
    }

    /// Sets a condition on every approval of this migration `select` picks.
    async fn mark_approvals(
        &self,
        select: impl Fn(&PtahMigrationApproval) -> bool,
        type_: ApprovalConditionType,
        reason: Reason,
    ) -> Result<(), Error> {
        let api: Api<PtahMigrationApproval> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing PtahMigrationApprovals"))?;
        let uid = self.uid();
        for a in list
            .items
            .into_iter()
            .filter(|a| a.spec.migration_ref.uid == uid && select(a))
        {
            runtime::mark_approval(&api, a, |a| &mut a.status, type_, reason, "").await?;
        }
        Ok(())
    }

    // ----- after the outcome is written ---------------------------------------

    async fn cleanup(&mut self) -> Result<(), Error> {
        if let Some(op) = self.harvested.take() {
            self.ctx.fault(FaultPoint::AfterOutcome, op);
        }
        let claim = self.status().active_operation;
        let selector = migration_dispatch::jobs_of(&self.name());
        runtime::sweep(self.ctx, &self.ns, &self.uid(), &selector, claim.as_ref()).await?;
        if std::mem::take(&mut self.plans_moved) {
            let keep = migration_plan::still_named(&self.status());
            migration_plan::collect(&self.ctx.client, &self.obj, &keep)
                .await
                .map_err(|e| Error::NotStored(format!("{}: {e}", self.name())))?;
        }
        if std::mem::take(&mut self.snapshot_taken) {
            let st = self.status();
            let named: Vec<String> = [
                st.source
                    .as_ref()
                    .and_then(|s| s.config_map.as_ref())
                    .map(|c| c.snapshot_name.clone()),
                st.active_operation
                    .as_ref()
                    .and_then(|c| c.source.as_ref())
                    .and_then(|s| s.snapshot_name.clone()),
            ]
            .into_iter()
            .flatten()
            .collect();
            runtime::collect_snapshots(self.ctx, &self.obj, &named).await?;
        }
        Ok(())
    }

    fn in_flight(&self) -> bool {
        let st = self.status();
        st.active_operation.is_some() || st.pending_lock_release.is_some()
    }

    /// Deletion waits for a dispatched run to end, then releases its Lease.
    async fn finalize(&mut self) -> Result<Action, Error> {
        let st = self.status();
        if let Some(c) = st
            .active_operation
            .as_ref()
            .filter(|c| c.dispatch_started && c.type_ == OperationType::Apply)
            && runtime::job_still_runs(self.ctx, &self.ns, c).await?
        {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        runtime::release_held(
            self.ctx,
            st.active_operation.as_ref(),
            st.pending_lock_release.as_ref(),
        )
        .await?;
        runtime::set_finalizer(&self.api, &self.obj, MIGRATION_FINALIZER, false).await?;
        Ok(Action::await_change())
    }
}
