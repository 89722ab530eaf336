//! One pass over a PtahSchema: read what changed, step the pure machine once
//! per observation, write each status before performing its effects.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::harvest::{self, Bindings, Harvest};
use super::{Context, Error, FaultPoint, dispatch, inputs, kube_err};
use crate::api::annotations::{SCHEMA_FINALIZER, SETTLED_APPLY};
use crate::api::approval::PtahSchemaApproval;
use crate::api::condition::{ApprovalConditionType, SchemaPlanConditionType};
use crate::api::condition::{ConditionStatus, Reason, SchemaConditionType, SchemaPhase};
use crate::api::migration::PtahMigration;
use crate::api::plan::PtahSchemaPlan;
use crate::api::realm::PtahRealm;
use crate::api::schema::{PtahSchema, PtahSchemaStatus, TargetStatus};
use crate::api::source::SourceKind;
use crate::api::status::{ActiveOperation, Authorization, OperationType, PendingLockRelease};
use crate::execution::job::{ClaimInput, build_job, is_job_of_claim};
use crate::execution::lease::Acquired;
use crate::execution::plan;
use crate::execution::receiver::{self, receiver_ca_config_map, token_secret};
use crate::execution::snapshot::{self, ResolveError};
use crate::lifecycle::conditions;
use crate::lifecycle::realm;
use crate::lifecycle::schema::{
    ApprovalSeen, Effect, Observation, PlanVerdict, engine_supported, step,
};
use crate::runner::database::PlanOutcome;

/// How many steps one pass takes at most; the rest waits for the next pass.
const MAX_STEPS: usize = 24;
/// A pass with nothing scheduled still looks again this often.
const IDLE_RECHECK: Duration = Duration::from_secs(300);
/// A claim with a Job under way is looked at this often besides its watch.
const JOB_RECHECK: Duration = Duration::from_secs(30);

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
        requeue_at: None,
        harvested: false,
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
    requeue_at: Option<Timestamp>,
    /// This pass read a Job's outcome.
    harvested: bool,
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
        let at = Timestamp::now()
            .checked_add(k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or_default())
            .unwrap_or_else(|_| Timestamp::now());
        self.requeue_at = Some(self.requeue_at.map_or(at, |r| r.min(at)));
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
        let st = self.status();
        if st
            .active_operation
            .as_ref()
            .is_some_and(|c| c.dispatch_started)
        {
            // Renew a held Lease well within its duration.
            let lease = st
                .active_operation
                .as_ref()
                .and_then(|c| c.lease_duration_seconds)
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(15) / 3 + 1));
            self.requeue_in(lease.unwrap_or(JOB_RECHECK).min(JOB_RECHECK));
        }
        self.requeue_in(IDLE_RECHECK);
        let at = self.requeue_at.unwrap_or_else(Timestamp::now);
        let wait = Timestamp::now()
            .duration_until(at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        Action::requeue(wait.max(Duration::from_millis(200)))
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
        let written = self
            .api
            .replace_status(&self.name(), &PostParams::default(), &next)
            .await
            .map_err(kube_err(format!(
                "writing status of PtahSchema {}",
                self.name()
            )))?;
        self.obj = written;
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
            obs.push(Observation::Realm(self.census().await?));
        }
        if let (Some(seen), Some(now)) = (st.observed_generation, self.obj.metadata.generation)
            && seen != now
        {
            obs.push(Observation::GenerationMoved);
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

    /// The realm census: every claimant in the cluster and the PtahRealms.
    async fn census(&self) -> Result<realm::RealmVerdict, Error> {
        let Some(me) = realm::claimant_of_schema(&self.obj) else {
            return Ok(realm::RealmVerdict::Ok);
        };
        let client = self.ctx.client.clone();
        let lp = ListParams::default();
        let schemas = Api::<PtahSchema>::all(client.clone())
            .list(&lp)
            .await
            .map_err(kube_err("listing PtahSchemas for the realm census"))?;
        let migrations = Api::<PtahMigration>::all(client.clone())
            .list(&lp)
            .await
            .map_err(kube_err("listing PtahMigrations for the realm census"))?;
        let realms = Api::<PtahRealm>::all(client)
            .list(&lp)
            .await
            .map_err(kube_err("listing PtahRealms for the realm census"))?;
        let all: Vec<realm::Claimant> = schemas
            .items
            .iter()
            .filter_map(realm::claimant_of_schema)
            .chain(
                migrations
                    .items
                    .iter()
                    .filter_map(realm::claimant_of_migration),
            )
            .collect();
        Ok(realm::verdict(&me, &all, &realms.items))
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
        let client = &self.ctx.client;
        let src = &self.obj.spec.source;
        let mut obs = Vec::new();
        let source_policy = match &src.source_policy_from {
            Some(p) => inputs::policy(client, &self.ns, p)
                .await
                .ok()
                .map(|(b, _)| b),
            None => None,
        };
        let policy_moved = src.kind() != Some(SourceKind::OCI)
            && !inputs::same_policy(recorded.source_policy.as_ref(), source_policy.as_ref());
        let content_moved = match (&src.config_map, recorded.config_map.as_ref()) {
            (Some(cm), Some(resolved)) => {
                match snapshot::current_content(client, &self.ns, cm).await {
                    Ok((uid, digest)) => uid != resolved.uid || digest != recorded.content_digest,
                    // Gone or unreadable: the next read says so, naming it.
                    Err(_) => false,
                }
            }
            _ => false,
        };
        // A Resolve or Verify under way reads the policy as it is now: its
        // result decides, and status keeps the old binding until then.
        let reading_source = st
            .active_operation
            .as_ref()
            .is_some_and(|c| matches!(c.type_, OperationType::Resolve | OperationType::Verify));
        if (policy_moved && !reading_source) || content_moved {
            obs.push(Observation::SourceChanged);
        }
        if let (Some(p), Some(evidence), false) = (
            &src.verification_policy_from,
            &recorded.verification,
            reading_source,
        ) {
            let current = inputs::policy(client, &self.ns, p)
                .await
                .ok()
                .map(|(b, _)| b);
            if !inputs::same_policy(Some(&evidence.policy), current.as_ref()) {
                obs.push(Observation::VerificationPolicyChanged);
            }
        }
        Ok(obs)
    }

    fn claim_input(c: &ActiveOperation) -> ClaimInput {
        ClaimInput {
            operation_id: c.operation_id.clone(),
            input_fingerprint: c.input_fingerprint.clone(),
            attempt: c.attempt,
            dispatch_not_after: c.dispatch_not_after.clone(),
            execution_not_after: c.execution_not_after.clone(),
        }
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
            let continuity = self
                .ctx
                .leases
                .renew(digest, &c.operation_id, epoch)
                .await?;
            if continuity == crate::execution::lease::Continuity::Lost {
                obs.push(Observation::LeaseContinuityLost);
            }
        }
        let Some(job_name) = c.job_name.clone() else {
            obs.push(Observation::JobLost);
            return Ok(obs);
        };
        let jobs: Api<Job> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let job = jobs
            .get_opt(&job_name)
            .await
            .map_err(kube_err(format!("reading Job {job_name}")))?;
        match job {
            Some(j) if is_job_of_claim(&j, &Self::claim_input(&c), &self.uid()) => {
                if c.job_uid.is_none() {
                    self.record_job_uid(&c, j.metadata.uid.clone()).await?;
                }
                if harvest::terminal(&j) {
                    obs.push(self.harvest(&c, Some(&j)).await?);
                }
            }
            // Another object holds the reserved name: not ours to read.
            Some(_) => obs.push(Observation::JobLost),
            None => {
                let stored =
                    receiver::harvest(&self.ctx.client, &self.ns, &c.operation_id, c.attempt)
                        .await?;
                if stored.is_some() {
                    obs.push(self.harvest(&c, None).await?);
                } else if c.job_uid.is_none() && c.type_ != OperationType::Apply {
                    // The create never happened (the manager stopped after
                    // writing the claim): make the one Job now.
                    obs.extend(self.dispatch(&c).await?);
                } else {
                    // A mutating claim is never dispatched again.
                    obs.push(Observation::JobLost);
                }
            }
        }
        Ok(obs)
    }

    async fn harvest(
        &mut self,
        c: &ActiveOperation,
        job: Option<&Job>,
    ) -> Result<Observation, Error> {
        let stored =
            receiver::harvest(&self.ctx.client, &self.ns, &c.operation_id, c.attempt).await?;
        self.harvested = true;
        let now = now();
        Ok(match (stored, job) {
            (Some(r), _) => {
                let bindings = self.bindings().await;
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
                let pod = self.pod_of(j).await?;
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
            actual_state_fingerprint: outcome.actual_state_fingerprint.clone(),
            desired_state_fingerprint: outcome.desired_state_fingerprint.clone(),
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

    /// The policies the result's bindings name, as they are now.
    async fn bindings(&self) -> Bindings {
        let src = &self.obj.spec.source;
        let read = |r: Option<&crate::api::common::ConfigMapKeyRef>| {
            let r = r.cloned();
            let client = self.ctx.client.clone();
            let ns = self.ns.clone();
            async move {
                match r {
                    Some(r) => inputs::policy(&client, &ns, &r).await.ok().map(|(b, _)| b),
                    None => None,
                }
            }
        };
        Bindings {
            source_policy: read(src.source_policy_from.as_ref()).await,
            verification_policy: read(src.verification_policy_from.as_ref()).await,
        }
    }

    async fn pod_of(&self, job: &Job) -> Result<Option<Pod>, Error> {
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let Some(uid) = job.metadata.uid.as_deref() else {
            return Ok(None);
        };
        let list = pods
            .list(
                &ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")),
            )
            .await
            .map_err(kube_err("listing the Job's Pods"))?;
        Ok(list.items.into_iter().next())
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
                    self.requeue_at = Some(self.requeue_at.map_or(t.0, |r| r.min(t.0)));
                }
            }
        }
        Ok(follow)
    }

    async fn take_snapshot(&mut self) -> Result<Observation, Error> {
        let Some(source) = self.obj.spec.source.config_map.clone() else {
            return Ok(Observation::ConfigurationError {
                message: "spec.source.configMap is not set".into(),
            });
        };
        let owner = match snapshot::Owner::of(&self.obj) {
            Ok(o) => o,
            Err(e) => {
                return Ok(Observation::ConfigurationError {
                    message: e.to_string(),
                });
            }
        };
        let policy = self.obj.spec.source.source_policy_from.clone();
        match snapshot::resolve_configmap(&self.ctx.client, &owner, &source, policy.as_ref()).await
        {
            Ok(res) => {
                self.snapshot_taken = true;
                Ok(Observation::SnapshotTaken(res.source_status(Some(now()))))
            }
            Err(e @ ResolveError::Refused { .. }) => Ok(Observation::SourceRefused {
                message: e.to_string(),
            }),
            Err(e) if e.is_transient() => {
                tracing::info!(schema = %self.name(), error = %e, "snapshot not taken yet");
                self.requeue_in(Duration::from_secs(2));
                Ok(Observation::Pass)
            }
            Err(e) => Ok(Observation::ConfigurationError {
                message: e.to_string(),
            }),
        }
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
        self.ctx.fault(FaultPoint::AfterClaim);
        if let Some(refused) = self.before_dispatch(c).await? {
            return Ok(Some(refused));
        }
        let not_built = |reason: Reason, message: String| {
            Ok(Some(Observation::JobNotBuilt { reason, message }))
        };
        let input = match dispatch::job_input(&self.obj, c, &self.ctx.config) {
            Ok(i) => i,
            Err(e) => return not_built(Reason::ConfigurationError, e.to_string()),
        };
        let job = match build_job(&input) {
            Ok(j) => j,
            Err(e) => return not_built(Reason::ConfigurationError, e.to_string()),
        };
        let Some(job_name) = job.metadata.name.clone() else {
            return not_built(Reason::ConfigurationError, "the Job has no name".into());
        };
        self.publish_receiver_ca().await?;
        let owner = self
            .obj
            .controller_owner_ref(&())
            .map(|mut o| {
                // The Secret is the schema's, but not under its control.
                o.controller = None;
                o
            })
            .ok_or_else(|| Error::NotStored(self.name()))?;
        let token = self.ctx.token_key.token(&c.operation_id, c.attempt);
        let secret = token_secret(&self.ns, &job_name, owner, &token);
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        match secrets.create(&PostParams::default(), &secret).await {
            // The same token again: a restart re-creates what it made.
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err("creating the result token Secret")(e)),
        }
        let jobs: Api<Job> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let uid = match jobs.create(&PostParams::default(), &job).await {
            Ok(created) => created.metadata.uid,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Adopt by name: the Job this claim made before a restart.
                let existing = jobs
                    .get_opt(&job_name)
                    .await
                    .map_err(kube_err(format!("reading Job {job_name}")))?;
                match existing {
                    Some(j) if is_job_of_claim(&j, &Self::claim_input(c), &self.uid()) => {
                        j.metadata.uid
                    }
                    _ => {
                        return not_built(
                            Reason::ConfigurationError,
                            format!("a Job named {job_name} exists and is not this claim's"),
                        );
                    }
                }
            }
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => {
                return not_built(
                    Reason::PodAdmissionRefused,
                    format!("Job {job_name} refused: {}", e.message),
                );
            }
            Err(e) => return Err(kube_err(format!("creating Job {job_name}"))(e)),
        };
        tracing::info!(schema = %self.name(), job = %job_name, operation = ?c.type_, "Job created");
        self.ctx.fault(FaultPoint::AfterJobCreate);
        self.record_job_uid(c, uid).await?;
        self.ctx.fault(FaultPoint::AfterJobUid);
        Ok(None)
    }

    /// What the manager checks before it makes a Job: a Git host against the
    /// source policy (Resolve), and that the snapshot an operation mounts
    /// still holds its bound content.
    async fn before_dispatch(&self, c: &ActiveOperation) -> Result<Option<Observation>, Error> {
        let src = &self.obj.spec.source;
        if c.type_ == OperationType::Resolve
            && let (Some(git), Some(policy)) = (&src.git, &src.source_policy_from)
        {
            return Ok(
                match inputs::policy(&self.ctx.client, &self.ns, policy).await {
                    Ok((_, bytes)) => inputs::check_git_host(&bytes, &git.url)
                        .err()
                        .map(|message| Observation::SourceRefused { message }),
                    Err(e) => Some(Observation::JobNotBuilt {
                        reason: Reason::ConfigurationError,
                        message: e.to_string(),
                    }),
                },
            );
        }
        if let Some(b) = &c.source
            && let Some(name) = &b.snapshot_name
        {
            let hold =
                snapshot::snapshot_still_holds(&self.ctx.client, &self.ns, name, &b.content_digest)
                    .await
                    .map_err(kube_err(format!("reading snapshot {name}")))?;
            if let Some(refusal) = hold.refusal() {
                return Ok(Some(Observation::JobNotBuilt {
                    reason: Reason::ConfigurationError,
                    message: refusal,
                }));
            }
        }
        Ok(None)
    }

    /// The receiver's CA, where this namespace's Pods can mount it.
    async fn publish_receiver_ca(&self) -> Result<(), Error> {
        let cm = receiver_ca_config_map(&self.ns, &self.ctx.receiver_ca_pem);
        let api: Api<ConfigMap> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let name = cm.name_any();
        api.patch(
            &name,
            &PatchParams::apply(crate::execution::job::MANAGED_BY).force(),
            &Patch::Apply(&cm),
        )
        .await
        .map_err(kube_err(format!("publishing ConfigMap {name}")))?;
        Ok(())
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
        mut a: PtahSchemaApproval,
        type_: ApprovalConditionType,
        reason: Reason,
        message: &str,
    ) -> Result<(), Error> {
        let name = a.name_any();
        let generation = a.metadata.generation;
        let st = a.status.get_or_insert_with(Default::default);
        conditions::set(
            &mut st.conditions,
            type_,
            ConditionStatus::True,
            reason,
            message,
            generation,
            &now(),
        );
        api.replace_status(&name, &PostParams::default(), &a)
            .await
            .map_err(kube_err(format!(
                "marking PtahSchemaApproval {name} {type_:?}"
            )))?;
        Ok(())
    }

    async fn event(&self, warning: bool, reason: Reason, message: String) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: format!("{reason:?}"),
            note: Some(message),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self
            .ctx
            .recorder
            .publish(&ev, &self.obj.object_ref(&()))
            .await
        {
            // An Event is best effort: status and the journal are the record.
            tracing::warn!(schema = %self.name(), error = %e, "event not published");
        }
    }

    // ----- after the outcome is written ---------------------------------------

    /// Cleans every ended Job of this schema that no claim attempt waits on:
    /// its cleanup TTL, its token Secret, and the stored results of an
    /// operation that is over. A sweep rather than a memory of this pass, so
    /// a manager stopped right after an outcome was written still cleans up.
    async fn cleanup(&mut self) -> Result<(), Error> {
        if std::mem::take(&mut self.harvested) {
            self.ctx.fault(FaultPoint::AfterOutcome);
        }
        let claim = self.status().active_operation;
        let uid = self.uid();
        let jobs: Api<Job> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let list = jobs
            .list(&ListParams::default().labels(&dispatch::jobs_of(&self.name())))
            .await
            .map_err(kube_err("listing the schema's Jobs"))?;
        for job in list.items {
            let name = job.name_any();
            let ours = job
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true));
            let has_ttl = job
                .spec
                .as_ref()
                .is_some_and(|s| s.ttl_seconds_after_finished.is_some());
            let current = claim
                .as_ref()
                .is_some_and(|c| c.job_name.as_deref() == Some(name.as_str()));
            if !ours || has_ttl || current || !harvest::terminal(&job) {
                continue;
            }
            let ttl =
                crate::execution::job::harvested_ttl_patch(self.ctx.config.harvested_ttl_seconds);
            match jobs
                .patch(&name, &PatchParams::default(), &Patch::Merge(&ttl))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(kube_err(format!("setting the TTL of Job {name}"))(e)),
            }
            let secret = receiver::token_secret_name(&name);
            match secrets.delete(&secret, &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(kube_err(format!("deleting Secret {secret}"))(e)),
            }
            let op = job
                .annotations()
                .get(crate::execution::job::ANNOTATION_OPERATION_ID)
                .cloned();
            if let Some(op) = op
                && claim.as_ref().is_none_or(|c| c.operation_id != op)
            {
                receiver::discard(&self.ctx.client, &self.ns, &op).await?;
            }
        }
        if std::mem::take(&mut self.plans_moved) {
            // Only what status still names stays: a retired plan's approvals
            // authorize nothing, and the journal keeps its identity.
            let keep = plan::still_named(&self.status());
            plan::collect(&self.ctx.client, &self.obj, &keep).await?;
        }
        if std::mem::take(&mut self.snapshot_taken)
            && let Ok(owner) = snapshot::Owner::of(&self.obj)
        {
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
            snapshot::collect_snapshots(&self.ctx.client, &owner, &named)
                .await
                .map_err(kube_err("collecting snapshots"))?;
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
        let has = self.obj.finalizers().iter().any(|f| f == SCHEMA_FINALIZER);
        let want = self.in_flight();
        if has == want {
            return Ok(());
        }
        let mut list: Vec<String> = self
            .obj
            .finalizers()
            .iter()
            .filter(|f| *f != SCHEMA_FINALIZER)
            .cloned()
            .collect();
        if want {
            list.push(SCHEMA_FINALIZER.into());
        }
        let patch = serde_json::json!({
            "metadata": {
                "finalizers": list,
                "resourceVersion": self.obj.metadata.resource_version,
            }
        });
        self.obj = self
            .api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "updating the finalizer of PtahSchema {}",
                self.name()
            )))?;
        Ok(())
    }

    /// Deletion waits for a dispatched Apply or a proof's Job to end (the
    /// database must not be left in a state nothing recorded), then releases
    /// the Lease and lets the garbage collector take the rest.
    async fn finalize(&mut self) -> Result<Action, Error> {
        if !self.obj.finalizers().iter().any(|f| f == SCHEMA_FINALIZER) {
            return Ok(Action::await_change());
        }
        let st = self.status();
        if let Some(c) = &st.active_operation
            && c.dispatch_started
            && (c.type_ == OperationType::Apply || st.pending_observation.is_some())
            && let Some(name) = &c.job_name
        {
            let jobs: Api<Job> = Api::namespaced(self.ctx.client.clone(), &self.ns);
            let job = jobs
                .get_opt(name)
                .await
                .map_err(kube_err(format!("reading Job {name}")))?;
            if job.as_ref().is_some_and(|j| !harvest::terminal(j)) {
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
        }
        let held = st
            .active_operation
            .as_ref()
            .and_then(|c| {
                Some(PendingLockRelease {
                    coordination_digest: c.coordination_digest.clone()?,
                    operation_id: c.operation_id.clone(),
                    lease_epoch: c.lease_epoch.clone()?,
                    lease_duration_seconds: c.lease_duration_seconds.unwrap_or(15),
                })
            })
            .into_iter()
            .chain(st.pending_lock_release.clone());
        for release in held {
            self.ctx.leases.release(&release).await?;
        }
        let list: Vec<String> = self
            .obj
            .finalizers()
            .iter()
            .filter(|f| *f != SCHEMA_FINALIZER)
            .cloned()
            .collect();
        let patch = serde_json::json!({ "metadata": { "finalizers": list } });
        self.api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "removing the finalizer of PtahSchema {}",
                self.name()
            )))?;
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
