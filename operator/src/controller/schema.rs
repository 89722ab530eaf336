//! One pass over a PtahSchema: read what changed, step the pure machine once
//! per observation, write each status before performing its effects.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action;

use super::harvest::{self, Harvest};
use super::runtime::{self, ClaimJob, Dispatch, GenerationMove, InputChange, Requeue, Snapshot};
use super::{Context, Error, FaultPoint, dispatch, kube_err};
use crate::api::annotations::{SCHEMA_FINALIZER, SETTLED_APPLY};
use crate::api::approval::PtahSchemaApproval;
use crate::api::condition::{ApprovalConditionType, SchemaPlanConditionType};
use crate::api::condition::{ConditionStatus, Reason, SchemaConditionType, SchemaPhase};
use crate::api::plan::PtahSchemaPlan;
use crate::api::schema::{PtahSchema, PtahSchemaStatus, TargetStatus};
use crate::api::status::{ActiveOperation, Authorization, OperationType, PendingLockRelease};
use crate::execution::lease::Acquired;
use crate::execution::plan;
use crate::lifecycle::conditions;
use crate::lifecycle::realm;
use crate::lifecycle::schema::{
    ApprovalSeen, Effect, Observation, PlanVerdict, engine_supported, step,
};
use crate::protocol::database::PlanOutcome;

/// How many steps one pass takes at most; the rest waits for the next pass.
const MAX_STEPS: usize = 24;

/// The reconcile function of the PtahSchema controller.
pub async fn reconcile(obj: Arc<PtahSchema>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<PtahSchema> = Api::namespaced(ctx.client.clone(), &ns);
    // The watch cache can trail our own writes: decide on the object as stored.
    let Some(current) = api
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading PtahSchema {ns}/{name}")))?
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
    api: Api<PtahSchema>,
    ns: String,
    obj: PtahSchema,
    requeue: Requeue,
    /// This pass read the outcome of a Job of this operation.
    harvested: Option<OperationType>,
    /// This pass published or retired a plan.
    plans_moved: bool,
    snapshot_taken: bool,
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl Pass<'_> {
    fn name(&self) -> String {
        self.obj.name_any()
    }

    fn status(&self) -> PtahSchemaStatus {
        self.obj.status.clone().unwrap_or_default()
    }

    fn uid(&self) -> String {
        self.obj.metadata.uid.clone().unwrap_or_default()
    }

    fn requeue_in(&mut self, d: Duration) {
        self.requeue.within(d);
    }

    async fn run(&mut self) -> Result<Action, Error> {
        if self.obj.metadata.deletion_timestamp.is_some() {
            return self.finalize().await;
        }
        if let Some(release) = self.status().pending_lock_release {
            self.ctx.leases.release(&release).await?;
            self.clear_release(&release).await?;
        }
        let mut queue: VecDeque<Observation> = self.gather().await?.into();
        queue.push_back(Observation::Pass);
        let mut steps = 0;
        while let Some(o) = queue.pop_front() {
            steps += 1;
            if steps > MAX_STEPS {
                self.requeue_in(Duration::ZERO);
                break;
            }
            let follow = self.step(&o).await?;
            // Follow-ups answer this step's effects: they come first.
            for f in follow.into_iter().rev() {
                queue.push_front(f);
            }
        }
        self.cleanup().await?;
        self.keep_finalizer().await?;
        Ok(self.action())
    }

    fn action(&mut self) -> Action {
        let claim = self.status().active_operation;
        std::mem::take(&mut self.requeue).action(claim.as_ref())
    }

    // ----- stepping ---------------------------------------------------------

    /// Records in status what the machine reads from it but only the
    /// controller knows: the target's coordination identity and the
    /// execution binding of a resource that has none.
    fn prepare(&mut self) {
        let ns = self.ns.clone();
        let engine = self.obj.spec.target.engine.clone();
        let digest = realm::coordination_digest(&engine, &ns, &self.obj.spec.target);
        let binding = self.ctx.config.execution.clone();
        let st = self.obj.status.get_or_insert_with(Default::default);
        let target = st.target.get_or_insert_with(TargetStatus::default);
        target.engine = Some(
            crate::api::common::DatabaseEngine::from_spec(&engine)
                .map(|e| e.canonical().to_string())
                .unwrap_or_else(|| engine.to_ascii_lowercase()),
        );
        target.coordination_digest = digest;
        if st.execution_binding.is_none() {
            st.execution_binding = Some(binding);
        }
    }

    async fn step(&mut self, o: &Observation) -> Result<Vec<Observation>, Error> {
        self.prepare();
        let stepped = step(&self.obj, o, &now());
        tracing::debug!(schema = %self.name(), observation = ?o, phase = ?stepped.status.phase, "step");
        self.write(stepped.status).await?;
        self.perform(stepped.effects).await
    }

    /// Writes the status, guarded by the resourceVersion read: a concurrent
    /// write fails the pass, which starts again from what is stored.
    async fn write(&mut self, status: PtahSchemaStatus) -> Result<(), Error> {
        if self.obj.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut next = self.obj.clone();
        next.status = Some(status);
        self.obj = runtime::write_status(&self.api, &next).await?;
        Ok(())
    }

    /// Edits the status outside the machine (the Job's UID, a released Lease).
    async fn edit_status(&mut self, f: impl FnOnce(&mut PtahSchemaStatus)) -> Result<(), Error> {
        let mut st = self.status();
        f(&mut st);
        if self.obj.status.as_ref() == Some(&st) {
            return Ok(());
        }
        self.write(st).await
    }

    // ----- what changed -----------------------------------------------------

    async fn gather(&mut self) -> Result<Vec<Observation>, Error> {
        let mut obs = Vec::new();
        let st = self.status();
        if !engine_supported(&self.obj) {
            obs.push(Observation::EngineUnsupported);
        } else {
            let me = realm::claimant_of_schema(&self.obj);
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
        obs.extend(self.source_inputs(&st).await?);
        obs.extend(self.claim_observations(&st).await?);
        obs.extend(self.approval_observations(&st).await?);
        let settled = self
            .obj
            .annotations()
            .get(SETTLED_APPLY)
            .zip(st.pending_observation.as_ref())
            .is_some_and(|(v, p)| *v == p.apply_operation_id);
        if settled && st.phase == Some(SchemaPhase::Blocked) {
            obs.push(Observation::SettledApply);
        }
        Ok(obs)
    }

    /// An edit of what the source or its policies name, read at once.
    async fn source_inputs(&self, st: &PtahSchemaStatus) -> Result<Vec<Observation>, Error> {
        let Some(recorded) = st.source.as_ref() else {
            return Ok(Vec::new());
        };
        // A resource waiting on its engine, its realm or a resume reads its
        // source when it starts again anyway.
        let waiting = self.obj.spec.suspend
            || st.phase == Some(SchemaPhase::Suspended)
            || matches!(
                conditions::get(&st.conditions, SchemaConditionType::Stalled).map(|c| c.reason),
                Some(
                    Reason::RealmConflict | Reason::RealmNotAuthorized | Reason::UnsupportedEngine
                )
            ) && st.phase == Some(SchemaPhase::Blocked);
        if waiting {
            return Ok(Vec::new());
        }
        let changes = runtime::input_changes(
            self.ctx,
            &self.ns,
            &self.obj.spec.source,
            recorded,
            st.active_operation.as_ref(),
        )
        .await;
        Ok(changes
            .into_iter()
            .map(|c| match c {
                InputChange::Source => Observation::SourceChanged,
                InputChange::VerificationPolicy => Observation::VerificationPolicyChanged,
            })
            .collect())
    }

    /// The claim's Job: its Lease's continuity, then whether it exists, runs
    /// or ended, and what it left.
    async fn claim_observations(
        &mut self,
        st: &PtahSchemaStatus,
    ) -> Result<Vec<Observation>, Error> {
        let Some(c) = st.active_operation.clone() else {
            return Ok(Vec::new());
        };
        if !c.dispatch_started {
            // A claim waiting for its Lease: a restart forgot the request.
            let waits_for_lease = matches!(c.type_, OperationType::Plan | OperationType::Apply)
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
        {
            // The proof reads under the Apply's Lease: it was acquired for
            // the Apply's operation, which the owed proof records.
            let holder_op = st
                .pending_observation
                .as_ref()
                .filter(|p| p.lease_epoch.as_deref() == Some(epoch.as_str()))
                .map_or(c.operation_id.as_str(), |p| p.apply_operation_id.as_str());
            let continuity = self.ctx.leases.renew(digest, holder_op, epoch).await?;
            if continuity == crate::execution::lease::Continuity::Lost {
                obs.push(Observation::LeaseContinuityLost);
            }
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
            // The create never happened (the manager stopped after writing
            // the claim): make the one Job now. A mutating claim is never
            // dispatched again.
            ClaimJob::Missing { stored: false }
                if c.job_uid.is_none() && c.type_ != OperationType::Apply =>
            {
                obs.extend(self.dispatch(&c).await?)
            }
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
        let now = now();
        Ok(match (stored, job) {
            (Some(r), _) => {
                let bindings = runtime::bindings(self.ctx, &self.ns, &self.obj.spec.source).await;
                let claimed = c.target_identity_digest.as_deref();
                match harvest::from_result(
                    c.type_,
                    &r.document,
                    r.job_uid,
                    claimed,
                    &bindings,
                    &now,
                ) {
                    Harvest::Observed(Observation::DriftObserved(mut t)) => {
                        // The machine replaces status.target: keep what only
                        // the controller knows.
                        let known = self.status().target.unwrap_or_default();
                        t.engine = known.engine;
                        t.coordination_digest = known.coordination_digest;
                        Observation::DriftObserved(t)
                    }
                    Harvest::Observed(o) => o,
                    Harvest::Publish(plan) => self.publish(c, &plan).await?,
                }
            }
            (None, Some(j)) => {
                let pod = runtime::pod_of(self.ctx, &self.ns, j).await?;
                harvest::without_result(c.type_, j, pod.as_ref())
            }
            (None, None) => Observation::JobLost,
        })
    }

    /// Publishes a Plan result's bytes as an immutable plan bound to what
    /// the claim read; the machine decides what the plan's verdict is.
    async fn publish(
        &self,
        c: &ActiveOperation,
        outcome: &PlanOutcome,
    ) -> Result<Observation, Error> {
        let Some(change) = &outcome.change else {
            return Ok(Observation::Planned(PlanVerdict::NoChange {
                target_identity_digest: Some(outcome.target_identity_digest.clone()),
            }));
        };
        let failed = |message: String| {
            Ok(Observation::JobFailed {
                reason: Reason::OperationFailed,
                message,
            })
        };
        if plan::content_digest(change.plan.as_bytes()) != change.content_digest {
            return failed("the plan's bytes do not give the digest the runner reported".into());
        }
        let st = self.status();
        let (Some(source), Some(coordination), Some(binding)) = (
            c.source.clone(),
            c.coordination_digest.clone(),
            st.execution_binding.clone(),
        ) else {
            return failed("the Plan claim names no source, database or execution binding".into());
        };
        let input = plan::PlanInput {
            bytes: change.plan.as_bytes().to_vec(),
            statement_count: change.statement_count,
            destructive: change.destructive,
            privilege_changes: change.privilege_changes.clone(),
            dialect: outcome.dialect.clone(),
            source,
            coordination_digest: coordination,
            target_identity_digest: outcome.target_identity_digest.clone(),
            actual_state_fingerprint: change.actual_state_fingerprint.clone(),
            desired_state_fingerprint: change.desired_state_fingerprint.clone(),
            execution_binding: binding,
        };
        match plan::publish(&self.ctx.client, &self.obj, input).await {
            Ok(published) => Ok(Observation::Planned(PlanVerdict::Changes {
                plan: Box::new(published.summary),
                protected_table: protects(&self.obj.spec.policy.protected_tables, &change.tables),
                target_identity_digest: Some(outcome.target_identity_digest.clone()),
            })),
            Err(e) if e.is_transient() => Err(Error::Plan(e)),
            Err(e) => failed(e.to_string()),
        }
    }

    async fn approval_observations(
        &self,
        st: &PtahSchemaStatus,
    ) -> Result<Vec<Observation>, Error> {
        let api: Api<PtahSchemaApproval> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let mut obs = Vec::new();
        match (&st.active_operation, &st.plan) {
            (Some(c), _)
                if c.type_ == OperationType::Apply
                    && !c.dispatch_started
                    && c.authorization == Some(Authorization::Approval) =>
            {
                let gone = match &c.approval_name {
                    Some(name) => api
                        .get_opt(name)
                        .await
                        .map_err(kube_err(format!("reading PtahSchemaApproval {name}")))?
                        .is_none_or(|a| a.metadata.uid != c.approval_uid),
                    None => true,
                };
                if gone {
                    obs.push(Observation::ApprovalAbsent);
                }
            }
            (None, Some(plan)) if st.phase == Some(SchemaPhase::AwaitingApproval) => {
                let list = api
                    .list(&ListParams::default())
                    .await
                    .map_err(kube_err("listing PtahSchemaApprovals"))?;
                let uid = self.uid();
                let found = list.items.into_iter().find(|a| {
                    a.spec.schema_ref.uid == uid
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
        Ok(obs)
    }

    // ----- effects ----------------------------------------------------------

    async fn perform(&mut self, effects: Vec<Effect>) -> Result<Vec<Observation>, Error> {
        let mut follow = Vec::new();
        for e in effects {
            match e {
                Effect::TakeSnapshot => follow.push(self.take_snapshot().await?),
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
                Effect::PublishPlan { name } => {
                    self.plans_moved = true;
                    self.plan_ready(&name).await?
                }
                Effect::RetirePlan { name, reason } => {
                    self.plans_moved = true;
                    self.retire_plan(&name, reason).await?
                }
                Effect::SpendApproval { name, uid } => self.spend_approval(&name, &uid).await?,
                Effect::ReleaseLease(release) => {
                    self.ctx.leases.release(&release).await?;
                    self.clear_release(&release).await?;
                }
                Effect::Event {
                    warning,
                    reason,
                    message,
                } => self.event(warning, reason, message).await,
                Effect::RequeueAt(t) => {
                    self.requeue.at(t.0);
                }
            }
        }
        Ok(follow)
    }

    async fn take_snapshot(&mut self) -> Result<Observation, Error> {
        let src = &self.obj.spec.source;
        let taken = runtime::take_snapshot(
            self.ctx,
            &self.obj,
            src.config_map.as_ref(),
            src.source_policy_from.as_ref(),
        )
        .await;
        Ok(match taken {
            Snapshot::Taken(src) => {
                self.snapshot_taken = true;
                Observation::SnapshotTaken(*src)
            }
            Snapshot::Refused(message) => Observation::SourceRefused { message },
            Snapshot::Invalid(message) => Observation::ConfigurationError { message },
            Snapshot::Later => {
                self.requeue_in(Duration::from_secs(2));
                Observation::Pass
            }
        })
    }

    async fn acquire(&mut self, c: &ActiveOperation) -> Result<Observation, Error> {
        let digest = c
            .coordination_digest
            .clone()
            .or_else(|| self.status().target.and_then(|t| t.coordination_digest));
        let Some(digest) = digest else {
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
                Acquired::Held {
                    epoch,
                    duration_seconds,
                } => Observation::LeaseAcquired {
                    epoch,
                    duration_seconds,
                },
                Acquired::Busy { retry_after, .. } => {
                    self.requeue_in(retry_after);
                    Observation::LeaseLost
                }
            },
        )
    }

    /// The one Job create of a claim whose `dispatchStarted` is written.
    async fn dispatch(&mut self, c: &ActiveOperation) -> Result<Option<Observation>, Error> {
        let input = dispatch::job_input(&self.obj, c, &self.ctx.config).map_err(|e| e.to_string());
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
        let op = c.operation_id.clone();
        let attempt = c.attempt;
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

    async fn clear_release(&mut self, release: &PendingLockRelease) -> Result<(), Error> {
        self.edit_status(|st| {
            if st.pending_lock_release.as_ref() == Some(release) {
                st.pending_lock_release = None;
            }
        })
        .await
    }

    async fn plan_ready(&self, name: &str) -> Result<(), Error> {
        let api: Api<PtahSchemaPlan> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let Some(mut plan) = api
            .get_opt(name)
            .await
            .map_err(kube_err(format!("reading PtahSchemaPlan {name}")))?
        else {
            return Ok(());
        };
        let st = plan.status.get_or_insert_with(Default::default);
        conditions::set(
            &mut st.conditions,
            SchemaPlanConditionType::Ready,
            ConditionStatus::True,
            Reason::Published,
            "",
            plan.metadata.generation,
            &now(),
        );
        api.replace_status(name, &PostParams::default(), &plan)
            .await
            .map_err(kube_err(format!("marking PtahSchemaPlan {name} published")))?;
        Ok(())
    }

    /// A retired plan authorizes nothing: every approval of it is stale.
    async fn retire_plan(&self, plan: &str, reason: Reason) -> Result<(), Error> {
        let api: Api<PtahSchemaApproval> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing PtahSchemaApprovals"))?;
        let message = format!("plan {plan} is no longer current; it authorizes nothing");
        for a in list
            .items
            .into_iter()
            .filter(|a| a.spec.plan_ref.name == plan)
        {
            self.mark_approval(&api, a, ApprovalConditionType::Stale, reason, &message)
                .await?;
        }
        Ok(())
    }

    async fn spend_approval(&self, name: &str, uid: &str) -> Result<(), Error> {
        let api: Api<PtahSchemaApproval> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let found = api
            .get_opt(name)
            .await
            .map_err(kube_err(format!("reading PtahSchemaApproval {name}")))?
            .filter(|a| a.metadata.uid.as_deref() == Some(uid));
        if let Some(a) = found {
            let (t, r) = (ApprovalConditionType::Consumed, Reason::DispatchCommitted);
            self.mark_approval(&api, a, t, r, "").await?;
        }
        Ok(())
    }

    /// Sets one condition of an approval through its status.
    async fn mark_approval(
        &self,
        api: &Api<PtahSchemaApproval>,
        a: PtahSchemaApproval,
        type_: ApprovalConditionType,
        reason: Reason,
        message: &str,
    ) -> Result<(), Error> {
        runtime::mark_approval(api, a, |a| &mut a.status, type_, reason, message).await
    }

    async fn event(&self, warning: bool, reason: Reason, message: String) {
        runtime::event(self.ctx, &self.obj, warning, reason, message).await;
    }

    // ----- after the outcome is written ---------------------------------------

    /// Cleans every ended Job of this schema that no claim attempt waits on:
    /// its cleanup TTL, its token Secret, and the stored results of an
    /// operation that is over. A sweep rather than a memory of this pass, so
    /// a manager stopped right after an outcome was written still cleans up.
    async fn cleanup(&mut self) -> Result<(), Error> {
        if let Some(op) = self.harvested.take() {
            self.ctx.fault(FaultPoint::AfterOutcome, op);
        }
        let claim = self.status().active_operation;
        let selector = dispatch::jobs_of(&self.name());
        runtime::sweep(self.ctx, &self.ns, &self.uid(), &selector, claim.as_ref()).await?;
        if std::mem::take(&mut self.plans_moved) {
            // Only what status still names stays: a retired plan's approvals
            // authorize nothing, and the journal keeps its identity.
            let keep = plan::still_named(&self.status());
            plan::collect(&self.ctx.client, &self.obj, &keep).await?;
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
                st.pending_observation
                    .as_ref()
                    .and_then(|p| p.source.as_ref())
                    .and_then(|s| s.snapshot_name.clone()),
            ]
            .into_iter()
            .flatten()
            .collect();
            runtime::collect_snapshots(self.ctx, &self.obj, &named).await?;
        }
        Ok(())
    }

    // ----- the finalizer --------------------------------------------------------

    /// Something may still be in flight: a claim, a proof owed, a Lease to
    /// release.
    fn in_flight(&self) -> bool {
        let st = self.status();
        st.active_operation.is_some()
            || st.pending_observation.is_some()
            || st.pending_lock_release.is_some()
    }

    async fn keep_finalizer(&mut self) -> Result<(), Error> {
        let want = self.in_flight();
        if let Some(stored) =
            runtime::set_finalizer(&self.api, &self.obj, SCHEMA_FINALIZER, want).await?
        {
            self.obj = stored;
        }
        Ok(())
    }

    /// Deletion waits for a dispatched Apply or a proof's Job to end (the
    /// database must not be left in a state nothing recorded), then releases
    /// the Lease and lets the garbage collector take the rest.
    async fn finalize(&mut self) -> Result<Action, Error> {
        let st = self.status();
        let must_end = st.active_operation.as_ref().filter(|c| {
            c.dispatch_started
                && (c.type_ == OperationType::Apply || st.pending_observation.is_some())
        });
        if let Some(c) = must_end
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
        runtime::set_finalizer(&self.api, &self.obj, SCHEMA_FINALIZER, false).await?;
        Ok(Action::await_change())
    }
}

/// Whether a plan changing `tables` touches one of `protected`: names compare
/// without case, and an unqualified protected name matches it in any schema.
fn protects(protected: &[String], tables: &[String]) -> bool {
    tables.iter().any(|t| {
        let t = t.to_ascii_lowercase();
        let bare = t.rsplit('.').next().unwrap_or(&t).to_string();
        protected.iter().any(|p| {
            let p = p.to_ascii_lowercase();
            p == t || (!p.contains('.') && p == bare)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::protects;

    #[test]
    fn a_protected_table_is_matched_qualified_or_bare_without_case() {
        let protected = vec!["public.customers".to_string(), "audit".to_string()];
        assert!(protects(&protected, &["PUBLIC.Customers".into()]));
        assert!(protects(&protected, &["billing.audit".into()]));
        assert!(!protects(&protected, &["billing.customers".into()]));
        assert!(!protects(&protected, &["public.orders".into()]));
        assert!(!protects(&[], &["public.orders".into()]));
    }
}
