//! One pass over a resource of either family: read what changed, step the
//! pure machine once per observation, and around each step perform its
//! effects: those that precede the status, then the rest, whose follow-ups
//! are stepped before anything gathered later. The status (claim, journal,
//! conditions in one write) is written before every effect that needs it
//! stored and at the end of the pass: steps whose effects need nothing
//! stored (a snapshot taken, a Lease acquired, an Event) share the write of
//! the step that follows them. The loop is [`drive`]; what differs between
//! the families is behind [`Family`].

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::family::{Family, Pass};
use super::harvest;
use super::runtime::{self, ClaimJob, Dispatch, GenerationMove, InputChange, Requeue, Snapshot};
use super::{Context, Error, FaultPoint, kube_err};
use crate::api::approval::Approval;
use crate::api::condition::{ApprovalConditionType, ConditionStatus, Reason};
use crate::api::status::{
    ActiveOperation, Authorization, OperationStatus, OperationType, PendingLockRelease,
};
use crate::execution::lease::{Acquired, Continuity};
use crate::execution::receiver::Addressee;
use crate::lifecycle::common::{ApprovalSeen, Seen, Shared};
use crate::telemetry::change::{self, Facts, SpanRecord};
use opentelemetry_sdk::trace::IdGenerator;

/// How many steps one pass takes at most; the rest waits for the next pass.
pub const MAX_STEPS: usize = 24;

/// What one pass drives, as its loop sees it: the machine's step and the
/// I/O around it. The real one is [`Pass`]; the loop's tests drive a fake.
pub trait Driver: Send {
    /// The machine's observations.
    type Observation: std::fmt::Debug + Send + Sync;
    /// The status a step asks to write.
    type Status: Send;
    /// The machine's effects.
    type Effect: Send;

    /// Steps the machine once on what is stored: pure.
    fn step(&mut self, o: &Self::Observation) -> (Self::Status, Vec<Self::Effect>);
    /// Whether the effect is performed before the status that asks it.
    fn precedes_status(e: &Self::Effect) -> bool;
    /// Whether the effect may be performed only once the status that asks
    /// it is stored (a Job create after its claim); the others go first.
    fn needs_stored_status(e: &Self::Effect) -> bool;
    /// Performs an effect that precedes the status.
    fn before_status(&mut self, e: Self::Effect) -> impl Future<Output = Result<(), Error>> + Send;
    /// Makes `st` the status the next step and effect see.
    fn stage(&mut self, st: Self::Status);
    /// Writes the staged status, if it differs from what is stored.
    fn flush(&mut self) -> impl Future<Output = Result<(), Error>> + Send;
    /// Performs an effect after the status; answers its follow-ups.
    fn perform(
        &mut self,
        e: Self::Effect,
    ) -> impl Future<Output = Result<Vec<Self::Observation>, Error>> + Send;
    /// The step limit was reached: the next pass comes at once.
    fn again_at_once(&mut self);
}

/// Steps `gathered` and then `last`, each step's follow-ups first, at most
/// [`MAX_STEPS`] steps.
pub async fn drive<D: Driver>(
    d: &mut D,
    gathered: Vec<D::Observation>,
    last: D::Observation,
) -> Result<(), Error> {
    let mut queue: VecDeque<D::Observation> = gathered.into();
    queue.push_back(last);
    let mut steps = 0;
    while let Some(o) = queue.pop_front() {
        steps += 1;
        if steps > MAX_STEPS {
            d.again_at_once();
            break;
        }
        let (status, effects) = d.step(&o);
        let (before, after): (Vec<_>, Vec<_>) = effects.into_iter().partition(D::precedes_status);
        for e in before {
            d.before_status(e).await?;
        }
        d.stage(status);
        let mut follow = Vec::new();
        for e in after {
            if D::needs_stored_status(&e) {
                d.flush().await?;
            }
            follow.extend(d.perform(e).await?);
        }
        // Follow-ups answer this step's effects: they come first.
        for f in follow.into_iter().rev() {
            queue.push_front(f);
        }
    }
    d.flush().await
}

/// How logs and the backoff name an object: `Kind namespace/name`.
pub fn object_key<F: Family>(obj: &F) -> String {
    let ns = obj.namespace().unwrap_or_default();
    format!("{} {ns}/{}", F::KIND, obj.name_any())
}

/// The reconcile function of either family's controller; a pass that
/// finishes resets the object's backoff.
pub async fn reconcile<F: Family>(obj: Arc<F>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_once(&*obj, &ctx).await;
    ctx.telemetry
        .metrics
        .reconciled(F::KIND, result.is_ok(), started.elapsed().as_secs_f64());
    let action = result?;
    ctx.backoff.succeeded(&object_key(&*obj));
    Ok(action)
}

async fn reconcile_once<F: Family>(obj: &F, ctx: &Context) -> Result<Action, Error> {
    let key = object_key(obj);
    // The store's copy decides unless it may trail this manager's own write:
    // then the object as stored does.
    let current = if ctx.current(&key, obj.meta().resource_version.as_deref()) {
        obj.clone()
    } else {
        let ns = obj.namespace().unwrap_or_default();
        let api: Api<F> = Api::namespaced(ctx.client.clone(), &ns);
        match api
            .get_opt(&obj.name_any())
            .await
            .map_err(kube_err(format!("reading {key}")))?
        {
            Some(o) => o,
            None => {
                ctx.saw(&key, None);
                return Ok(Action::await_change());
            }
        }
    };
    let ns = current.namespace().unwrap_or_default();
    let stored_verdict = F::verdict(&current.status().cloned().unwrap_or_default());
    let mut pass = Pass {
        stored_verdict,
        ctx,
        api: Api::namespaced(ctx.client.clone(), &ns),
        ns,
        obj: current,
        requeue: Requeue::default(),
        harvested: None,
        plans_moved: false,
        snapshot_taken: false,
        unwritten: false,
    };
    let result = pass.run().await;
    let meta = pass.obj.meta();
    let gone = meta.deletion_timestamp.is_some() && pass.obj.finalizers().is_empty();
    let version = meta.resource_version.as_deref().filter(|_| !gone);
    ctx.saw(&key, version);
    result
}

impl<F: Family> Driver for Pass<'_, F> {
    type Observation = F::Observation;
    type Status = F::Status;
    type Effect = F::Effect;

    fn step(&mut self, o: &F::Observation) -> (F::Status, Vec<F::Effect>) {
        let binding = self.ctx.config.execution.clone();
        let st = self.obj.status_mut().get_or_insert_with(Default::default);
        if st.execution_binding().is_none() {
            *st.execution_binding_mut() = Some(binding);
            self.unwritten = true;
        }
        F::prepare(self);
        let stepped = self.obj.step(o, &runtime::now());
        tracing::debug!(kind = F::KIND, name = %self.name(), observation = ?o, "step");
        stepped
    }

    fn precedes_status(e: &F::Effect) -> bool {
        F::precedes_status(e)
    }

    fn needs_stored_status(e: &F::Effect) -> bool {
        F::needs_stored_status(e)
    }

    async fn before_status(&mut self, e: F::Effect) -> Result<(), Error> {
        F::perform_before(self, e).await
    }

    fn stage(&mut self, st: F::Status) {
        Pass::stage(self, st)
    }

    async fn flush(&mut self) -> Result<(), Error> {
        Pass::flush(self).await
    }

    async fn perform(&mut self, e: F::Effect) -> Result<Vec<F::Observation>, Error> {
        Pass::perform(self, e).await
    }

    fn again_at_once(&mut self) {
        self.requeue.within(Duration::ZERO);
    }
}

impl<F: Family> Pass<'_, F> {
    /// The resource's name.
    pub fn name(&self) -> String {
        self.obj.name_any()
    }

    /// The status as last stored (or stepped).
    pub fn status(&self) -> F::Status {
        self.obj.status().cloned().unwrap_or_default()
    }

    /// The resource as the receiver's hand-over names it.
    fn addressee(&self) -> Addressee {
        super::addressee(&self.obj)
    }

    /// The resource's UID.
    pub fn uid(&self) -> String {
        self.obj.meta().uid.clone().unwrap_or_default()
    }

    async fn run(&mut self) -> Result<Action, Error> {
        if self.obj.meta().deletion_timestamp.is_some() {
            return self.finalize().await;
        }
        // How late a due pass starts: the reconcile queue's wait
        // (docs/performance.md reads it from this line).
        if let Some(due) = self.status().next_reconciliation_time()
            && let Ok(late) = std::time::Duration::try_from(runtime::now().0.duration_since(due.0))
        {
            tracing::debug!(kind = F::KIND, name = %self.name(), late_ms = late.as_millis() as u64, "due pass");
        }
        if let Some(release) = self.status().pending_lock_release().cloned() {
            self.release(&release).await?;
        }
        let gathered = self.gather().await?;
        drive(self, gathered, Seen::Pass.into()).await?;
        self.cleanup().await?;
        // The finalizer stays for the resource's life: held only while
        // something was in flight, it cost two writes every read cycle.
        if let Some(stored) =
            runtime::set_finalizer(&self.api, &self.obj, F::FINALIZER, true).await?
        {
            self.obj = stored;
        }
        let claim = self.status().active_operation().cloned();
        Ok(std::mem::take(&mut self.requeue).action(claim.as_ref()))
    }

    /// Makes `status` the one the next step sees, to be written by the next
    /// [`Pass::flush`].
    pub fn stage(&mut self, status: F::Status) {
        if self.obj.status() != Some(&status) {
            *self.obj.status_mut() = Some(status);
            self.unwritten = true;
        }
    }

    /// Writes the staged status, guarded by the resourceVersion read: a
    /// concurrent write fails the pass, which starts again from what is
    /// stored.
    pub async fn flush(&mut self) -> Result<(), Error> {
        if !std::mem::take(&mut self.unwritten) {
            return Ok(());
        }
        let spans = self.trace_change();
        self.obj = runtime::write_status(&self.api, &self.obj).await?;
        // A result handed over for a claim this write ended is recorded:
        // its runner is answered now.
        let st = self.status();
        let claim = st.active_operation();
        self.ctx.inbox.written(
            &self.addressee(),
            claim.map(|c| (c.operation_id.as_str(), c.attempt)),
        );
        self.stored_verdict = F::verdict(&st);
        // Only what is stored is exported: a write refused exports nothing,
        // and the pass that follows steps again from what is stored.
        self.ctx.telemetry.metrics.spans_ended(F::KIND, &spans);
        self.ctx.telemetry.spans.export(spans);
        Ok(())
    }

    /// Steps the change's trace in the staged status; returns the spans
    /// that end with its write.
    fn trace_change(&mut self) -> Vec<SpanRecord> {
        let st = self.status();
        let ns = self.ns.clone();
        let name = self.name();
        // A claim not yet dispatched (waiting on the realm Lease) has no
        // Job and has spent no approval yet.
        let dispatched = st.active_operation().is_none_or(|c| c.dispatch_started);
        let claim = st.active_operation().filter(|c| c.dispatch_started);
        let facts = Facts {
            family: F::KIND,
            namespace: &ns,
            name: &name,
            at: change::until_dispatch(self.obj.change_at(&st), dispatched),
            verdict: F::verdict(&st),
            plan: F::plan_named(&st),
            claim: claim.map(|c| (c.operation_id.as_str(), c.job_name.as_deref())),
            journal: F::journal(&st),
            provenance: change::provenance(st.source()),
        };
        let mut new_id = [0u8; 16];
        new_id.copy_from_slice(
            &opentelemetry_sdk::trace::RandomIdGenerator::default()
                .new_trace_id()
                .to_bytes(),
        );
        let (trace, spans) = change::advance(
            st.trace().cloned(),
            &self.stored_verdict,
            &facts,
            k8s_openapi::jiff::Timestamp::now(),
            new_id,
        );
        if let Some(stored) = self.obj.status_mut() {
            *stored.trace_mut() = trace;
        }
        spans
    }

    /// Writes `status` now.
    pub async fn write(&mut self, status: F::Status) -> Result<(), Error> {
        self.stage(status);
        self.flush().await
    }

    /// Edits the status outside the machine (an Apply Job's UID) and writes
    /// it.
    pub async fn edit_status(&mut self, f: impl FnOnce(&mut F::Status)) -> Result<(), Error> {
        let mut st = self.status();
        f(&mut st);
        self.write(st).await
    }

    // ----- what changed -----------------------------------------------------

    async fn gather(&mut self) -> Result<Vec<F::Observation>, Error> {
        let st = self.status();
        let mut obs: Vec<F::Observation> = Vec::new();
        if !self.obj.engine_supported() {
            obs.push(Seen::EngineUnsupported.into());
        } else {
            let verdict = runtime::census(self.ctx.stores(), self.obj.claimant());
            obs.push(Seen::Realm(verdict).into());
        }
        let (generation, digest) = st.observed();
        match runtime::generation_move(
            generation,
            digest,
            self.obj.meta().generation,
            self.obj.spec(),
        ) {
            Some(GenerationMove::SuspendOnly) => obs.push(Seen::SuspendChanged.into()),
            Some(GenerationMove::Spec) => obs.push(Seen::GenerationMoved.into()),
            None => {}
        }
        if let Some(recorded) = st.execution_binding()
            && *recorded != self.ctx.config.execution
        {
            let now = self.ctx.config.execution.clone();
            obs.push(Seen::ExecutionBindingChanged(now).into());
        }
        if let Some(recorded) = st.source()
            && !self.obj.inputs_wait(&st)
        {
            let changes = runtime::input_changes(
                self.ctx,
                &self.ns,
                self.obj.source(),
                recorded,
                st.active_operation(),
            )
            .await;
            obs.extend(changes.into_iter().map(|c| {
                match c {
                    InputChange::Source => Seen::SourceChanged,
                    InputChange::VerificationPolicy => Seen::VerificationPolicyChanged,
                }
                .into()
            }));
        }
        obs.extend(self.claim_observations(&st).await?);
        obs.extend(self.approval_observations(&st).await?);
        obs.extend(F::own_observations(self, &st).await?);
        Ok(obs)
    }

    /// The claim's Job: its Lease's continuity, then whether it exists, runs
    /// or ended, and what it left.
    async fn claim_observations(&mut self, st: &F::Status) -> Result<Vec<F::Observation>, Error> {
        let Some(c) = st.active_operation().cloned() else {
            return Ok(Vec::new());
        };
        if !c.dispatch_started {
            // A claim waiting for its Lease: a restart forgot the request.
            if F::waits_for_lease(&c) && c.lease_epoch.is_none() && c.retry_not_before.is_none() {
                return Ok(vec![self.acquire(&c).await?]);
            }
            return Ok(Vec::new());
        }
        let mut obs = Vec::new();
        let job = runtime::claim_job(self.ctx, &self.addressee(), &self.uid(), &c).await?;
        if let (Some(epoch), Some(digest)) = (&c.lease_epoch, &c.coordination_digest)
            && !c.lease_continuity_lost
        {
            // Before any result is harvested, the Lease is read and must
            // still carry the epoch (renewed too, unless ours is recent);
            // while the Job runs, a recent renewal of ours stands unread.
            let holder = F::lease_holder(st, &c);
            let leases = &self.ctx.leases;
            let continuity = match job {
                ClaimJob::Running(_) => leases.renew_if_due(digest, holder, epoch).await?,
                _ => leases.verify(digest, holder, epoch).await?,
            };
            if continuity == Continuity::Lost {
                obs.push(Seen::LeaseContinuityLost.into());
            }
        }
        match job {
            ClaimJob::Running(uid) => {
                if c.job_uid.is_none() && c.type_ == OperationType::Apply {
                    self.record_job_uid(&c, uid).await?;
                }
            }
            ClaimJob::Ended(j) => {
                if c.job_uid.is_none() && c.type_ == OperationType::Apply {
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
                obs.push(Seen::JobLost.into())
            }
        }
        Ok(obs)
    }

    /// What a terminal Job of the claim left: a source read for either
    /// family, the family's own result, or the Job's own state.
    async fn harvest(
        &mut self,
        c: &ActiveOperation,
        job: Option<&Job>,
    ) -> Result<F::Observation, Error> {
        let stored = runtime::stored_result(self.ctx, &self.addressee(), c).await?;
        self.harvested = Some(c.type_);
        let outcome = stored
            .as_ref()
            .map(|r| format!("{:?}", r.document.outcome))
            .unwrap_or_else(|| "NoResult".into());
        self.ctx
            .telemetry
            .metrics
            .operation_ended(F::KIND, &format!("{:?}", c.type_), &outcome);
        let Some(r) = stored else {
            return Ok(match (c.type_, job) {
                (_, None) => Seen::JobLost.into(),
                (OperationType::Apply, Some(j)) => F::apply_without_result(j),
                // A lost result is safe for a read, which runs again.
                (_, Some(j)) => {
                    let pod = runtime::pod_of(self.ctx, &self.ns, j).await?;
                    Seen::JobFailed {
                        reason: Reason::OperationFailed,
                        message: harvest::lost_result(j, pod.as_ref()),
                    }
                    .into()
                }
            });
        };
        if c.type_ == OperationType::Resolve
            && r.document.outcome == crate::protocol::result::Outcome::Succeeded
            && let Some(out) = &r.document.result
            && let Some(fetched) = harvest::flux_fetched(out)
        {
            return Ok(self.flux_resolved(out, fetched).await.into());
        }
        let bindings = runtime::bindings(self.ctx, &self.ns, self.obj.source()).await;
        if let Some(read) = harvest::source_read(c.type_, &r.document, &bindings, &runtime::now()) {
            return Ok(Seen::from(read).into());
        }
        F::harvest(self, c, r).await
    }

    /// Approvals, from the store: the one an Apply claim names, or one of
    /// the plan awaited. Only an approval whose stamp admission signed
    /// counts; one of the plan awaited that is not signed is marked so.
    async fn approval_observations(&self, st: &F::Status) -> Result<Vec<F::Observation>, Error> {
        let store = F::approvals(self.ctx.stores());
        let signed = |a: &F::Approval| self.signed(a).is_ok();
        let mut obs = Vec::new();
        match (st.active_operation(), F::awaiting_approval(st)) {
            (Some(c), _)
                if c.type_ == OperationType::Apply
                    && !c.dispatch_started
                    && c.authorization == Some(Authorization::Approval) =>
            {
                let gone = c.approval_name.as_ref().is_none_or(|name| {
                    store
                        .get(&ObjectRef::new(name).within(&self.ns))
                        .is_none_or(|a| a.meta().uid != c.approval_uid || !signed(&a))
                });
                if gone {
                    obs.push(Seen::ApprovalAbsent.into());
                }
            }
            (None, Some((plan_uid, fingerprint))) => {
                let uid = self.uid();
                let of_plan = store.state_filter(|a| {
                    a.meta().namespace.as_deref() == Some(self.ns.as_str())
                        && a.owner().uid == uid
                        && a.plan_ref().uid == plan_uid
                        && a.plan_fingerprint() == fingerprint
                        && a.meta().deletion_timestamp.is_none()
                        && !a.consumed()
                });
                for a in of_plan.iter().filter(|a| !signed(a)) {
                    self.refuse_unsigned(a).await?;
                }
                if let Some(a) = of_plan.iter().find(|a| signed(a)) {
                    obs.push(
                        Seen::ApprovalExists(ApprovalSeen {
                            name: a.name_any(),
                            uid: a.meta().uid.clone().unwrap_or_default(),
                            plan_uid,
                            plan_fingerprint: fingerprint,
                            approver: a.approver().cloned(),
                            approved_at: a.approved_at().cloned(),
                        })
                        .into(),
                    );
                }
            }
            _ => {}
        }
        Ok(obs)
    }

    /// Whether admission signed `a`'s stamp with this manager's key.
    pub(super) fn signed<A: crate::api::approval::Approval>(
        &self,
        a: &A,
    ) -> Result<(), crate::admission::Unsigned> {
        let kind = A::kind(&());
        self.ctx.stamp_key.verify(&kind, &self.ns, a.spec())
    }

    /// Marks an approval whose stamp admission did not sign (once) and says
    /// so on the resource: it authorizes nothing.
    async fn refuse_unsigned(&self, a: &F::Approval) -> Result<(), Error> {
        let refused = a.status().is_some_and(|st| {
            st.conditions.iter().any(|c| {
                c.type_ == ApprovalConditionType::Accepted && c.reason == Reason::StampNotSigned
            })
        });
        if refused {
            return Ok(());
        }
        let why = self
            .signed(a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let message = format!(
            "approval {} authorizes nothing: {why}; create it again through the API server with the operator's webhooks registered",
            a.name_any()
        );
        tracing::warn!(namespace = %self.ns, approval = %a.name_any(), "{message}");
        runtime::event(
            self.ctx,
            &self.obj,
            true,
            Reason::StampNotSigned,
            message.clone(),
        )
        .await;
        let api: Api<F::Approval> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        runtime::mark_approval(
            &api,
            a.clone(),
            |a| a.status_mut(),
            ApprovalConditionType::Accepted,
            ConditionStatus::False,
            Reason::StampNotSigned,
            &message,
        )
        .await
    }

    // ----- effects ----------------------------------------------------------

    async fn perform(&mut self, e: F::Effect) -> Result<Vec<F::Observation>, Error> {
        let claim = self.status().active_operation().cloned();
        let mut follow = Vec::new();
        match F::shared(e) {
            Ok(Shared::TakeSnapshot) => follow.push(self.take_snapshot().await),
            Ok(Shared::AcquireLease { .. }) => {
                if let Some(c) = claim {
                    follow.push(self.acquire(&c).await?);
                }
            }
            Ok(Shared::StartJob { .. }) => {
                if let Some(c) = claim {
                    follow.extend(self.dispatch(&c).await?);
                }
            }
            Ok(Shared::RetirePlan { name, reason }) => {
                self.plans_moved = true;
                // A retired plan authorizes nothing: every approval is stale.
                let message = format!("plan {name} is no longer current; it authorizes nothing");
                self.mark_approvals(
                    |a| a.plan_ref().name == name,
                    ApprovalConditionType::Stale,
                    reason,
                    &message,
                )
                .await?;
            }
            Ok(Shared::SpendApproval { name, uid }) => {
                self.mark_approvals(
                    |a| {
                        a.meta().name.as_deref() == Some(name.as_str())
                            && a.meta().uid.as_deref() == Some(uid.as_str())
                    },
                    ApprovalConditionType::Consumed,
                    Reason::DispatchCommitted,
                    "",
                )
                .await?;
            }
            Ok(Shared::ReleaseLease(release)) => self.release(&release).await?,
            Ok(Shared::Event {
                warning,
                reason,
                message,
            }) => runtime::event(self.ctx, &self.obj, warning, reason, message).await,
            Ok(Shared::RequeueAt(t)) => self.requeue.at(t.0),
            Err(own) => follow.extend(F::perform_own(self, own).await?),
        }
        Ok(follow)
    }

    async fn take_snapshot(&mut self) -> F::Observation {
        let src = self.obj.source();
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
                Seen::SnapshotTaken(*src)
            }
            Snapshot::Refused(message) => Seen::SourceRefused { message },
            Snapshot::Invalid(message) => Seen::ConfigurationError { message },
            Snapshot::Later => {
                self.requeue.within(Duration::from_secs(2));
                Seen::Pass
            }
        }
        .into()
    }

    async fn acquire(&mut self, c: &ActiveOperation) -> Result<F::Observation, Error> {
        let digest = c
            .coordination_digest
            .clone()
            .or_else(|| F::recorded_coordination(&self.status()));
        let Some(digest) = digest else {
            return Ok(Seen::ConfigurationError {
                message: "spec.target names no coordination identity".into(),
            }
            .into());
        };
        let secs = crate::execution::lease::duration_for(
            self.ctx.config.lease_duration_seconds,
            self.obj.job_spec().execution.active_deadline_seconds,
        );
        let acquired = self
            .ctx
            .leases
            .acquire(&digest, &c.operation_id, secs, &self.addressee())
            .await?;
        Ok(match acquired {
            Acquired::Held {
                epoch,
                duration_seconds,
            } => Seen::LeaseAcquired {
                epoch,
                duration_seconds,
            },
            Acquired::Busy { retry_after, .. } => {
                self.requeue.within(retry_after);
                Seen::LeaseLost
            }
        }
        .into())
    }

    /// Releases a staged Lease. Status forgets the release with its next
    /// write, not with one of its own: until then a pass releases it again,
    /// which finds the epoch gone and writes nothing. An Apply that follows
    /// the releasing Plan at once keeps the Plan's place at the Lease.
    async fn release(&mut self, release: &PendingLockRelease) -> Result<(), Error> {
        let followed_by = F::apply_follows(&self.status()).then(|| self.addressee());
        let leases = &self.ctx.leases;
        leases.release(release, followed_by.as_ref()).await?;
        if let Some(st) = self.obj.status_mut()
            && st.pending_lock_release() == Some(release)
        {
            *st.pending_lock_release_mut() = None;
        }
        Ok(())
    }

    /// The one Job create of a claim whose `dispatchStarted` is written.
    async fn dispatch(&mut self, c: &ActiveOperation) -> Result<Option<F::Observation>, Error> {
        let input = F::job_input(self, c).await.map(|mut input| {
            input.trace = self.job_trace();
            input
        });
        let src = self.obj.source().clone();
        Ok(
            match runtime::dispatch(self.ctx, &self.obj, &src, c, input).await? {
                Dispatch::Refused(message) => Some(Seen::SourceRefused { message }.into()),
                Dispatch::NotBuilt { reason, message } => {
                    Some(Seen::JobNotBuilt { reason, message }.into())
                }
                Dispatch::Created(uid) => {
                    self.ctx
                        .telemetry
                        .metrics
                        .job_created(F::KIND, &format!("{:?}", c.type_));
                    // A mutation's Job must be told from any other of its
                    // name before anything else happens; a read's result is
                    // bound to its Job by the receiver, and its claim ends
                    // with the harvest.
                    if c.type_ == OperationType::Apply {
                        self.record_job_uid(c, uid).await?;
                    }
                    self.ctx.fault(FaultPoint::AfterJobUid, c.type_);
                    None
                }
            },
        )
    }

    /// A Flux artifact the Resolve Job fetched: snapshotted like a
    /// ConfigMap's files, then the resolution. A snapshot that cannot be
    /// written is a failed Resolve, which runs again.
    async fn flux_resolved(
        &self,
        out: &crate::protocol::result::StepOutput,
        fetched: Result<harvest::FluxFetched, String>,
    ) -> Seen {
        let failed = |message: String| Seen::JobFailed {
            reason: Reason::ResolveFailed,
            message,
        };
        let Some(flux) = self.obj.source().flux.as_ref() else {
            return failed("spec.source.flux: no longer set".into());
        };
        let fetched = match fetched {
            Ok(f) => f,
            Err(message) => return failed(message),
        };
        let owner = match crate::execution::snapshot::Owner::of(&self.obj) {
            Ok(o) => o,
            Err(e) => return failed(e.to_string()),
        };
        let source_name = format!("{}/{}", flux.kind.as_str(), flux.name);
        let stored = crate::execution::snapshot::snapshot_fetched(
            &self.ctx.client,
            &owner,
            &source_name,
            &fetched.object_uid,
            fetched.files,
            &fetched.content_digest,
        )
        .await;
        match stored {
            Ok(snapshot) => match harvest::flux_status(flux, out, snapshot, &runtime::now()) {
                Some(src) => Seen::SourceResolved(src),
                None => failed("resolve flux: no resolution in the result".into()),
            },
            Err(e) => failed(e.to_string()),
        }
    }

    /// The trace context the claim's Job carries: the span of the stage the
    /// change is in, once it is past reading its source or known to be worth
    /// a trace (a read that may find nothing is not traced into its Jobs).
    fn job_trace(&self) -> Option<crate::execution::job::TraceInput> {
        let st = self.status();
        let trace = st.trace()?;
        let worth = trace.exported || trace.stage != crate::api::trace::Stage::Source;
        if !worth || !self.ctx.telemetry.spans.sampled(&change::trace_id(trace)) {
            return None;
        }
        let (traceparent, tracestate) = change::job_context(trace);
        Some(crate::execution::job::TraceInput {
            traceparent,
            tracestate,
            exporter: self.ctx.telemetry.job_exporter.clone(),
        })
    }

    async fn record_job_uid(
        &mut self,
        c: &ActiveOperation,
        uid: Option<String>,
    ) -> Result<(), Error> {
        let (op, attempt) = (c.operation_id.clone(), c.attempt);
        self.edit_status(|st| {
            if let Some(claim) = st.active_operation_mut().as_mut()
                && claim.operation_id == op
                && claim.attempt == attempt
            {
                claim.job_uid = uid;
            }
        })
        .await
    }

    /// Sets a condition on every approval of this resource `select` picks.
    async fn mark_approvals(
        &self,
        select: impl Fn(&F::Approval) -> bool,
        type_: ApprovalConditionType,
        reason: Reason,
        message: &str,
    ) -> Result<(), Error> {
        let api: Api<F::Approval> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let uid = self.uid();
        let ns = self.ns.as_str();
        let picked = F::approvals(self.ctx.stores()).state_filter(|a| {
            a.meta().namespace.as_deref() == Some(ns) && a.owner().uid == uid && select(a)
        });
        for a in picked {
            let a = (*a).clone();
            runtime::mark_approval(
                &api,
                a,
                |a| a.status_mut(),
                type_,
                ConditionStatus::True,
                reason,
                message,
            )
            .await?;
        }
        Ok(())
    }

    // ----- after the outcome is written ---------------------------------------

    /// Cleans every ended Job of the resource that no claim attempt waits
    /// on, the plans and snapshots status no longer names. A sweep rather
    /// than a memory of this pass, so a manager stopped right after an
    /// outcome was written still cleans up.
    async fn cleanup(&mut self) -> Result<(), Error> {
        if let Some(op) = self.harvested.take() {
            self.ctx.fault(FaultPoint::AfterOutcome, op);
        }
        let st = self.status();
        let selector = F::jobs_of(&self.name());
        runtime::sweep(
            self.ctx,
            &self.ns,
            &self.uid(),
            &selector,
            st.active_operation(),
        )
        .await?;
        if std::mem::take(&mut self.plans_moved) {
            F::collect_plans(self).await?;
        }
        if std::mem::take(&mut self.snapshot_taken) {
            let named = F::snapshots_named(&self.status());
            runtime::collect_snapshots(self.ctx, &self.obj, &named).await?;
        }
        Ok(())
    }

    // ----- the finalizer --------------------------------------------------------

    /// Deletion waits for a dispatched Apply or a proof's Job to end (the
    /// database must not be left in a state nothing recorded), then releases
    /// the Lease and lets the garbage collector take the rest.
    async fn finalize(&mut self) -> Result<Action, Error> {
        let st = self.status();
        let must_end = st.active_operation().filter(|c| {
            c.dispatch_started && (c.type_ == OperationType::Apply || F::proof_owed(&st))
        });
        if let Some(c) = must_end
            && runtime::job_still_runs(self.ctx, &self.ns, c).await?
        {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        runtime::release_held(self.ctx, st.active_operation(), st.pending_lock_release()).await?;
        if let Some(stored) =
            runtime::set_finalizer(&self.api, &self.obj, F::FINALIZER, false).await?
        {
            self.obj = stored;
        }
        Ok(Action::await_change())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use futures::executor::block_on;

    use super::*;

    /// An effect of the fake machine: its name, whether it precedes the
    /// status or needs it stored, and the follow-ups performing it answers.
    #[derive(Clone, Debug)]
    struct Fx {
        name: &'static str,
        before: bool,
        stored: bool,
        follow: Vec<&'static str>,
    }

    fn fx(name: &'static str, follow: &[&'static str]) -> Fx {
        Fx {
            name,
            before: false,
            stored: true,
            follow: follow.to_vec(),
        }
    }

    /// An effect that needs nothing stored.
    fn unstored(name: &'static str, follow: &[&'static str]) -> Fx {
        Fx {
            stored: false,
            ..fx(name, follow)
        }
    }

    /// A machine whose steps are scripted by observation, recording every
    /// call of the loop in order; no API server. Its status is the name of
    /// the step that staged it.
    #[derive(Default)]
    struct Fake {
        script: HashMap<&'static str, Vec<Fx>>,
        log: Vec<String>,
        fail_write_of: Option<&'static str>,
        staged: Option<&'static str>,
        again: bool,
    }

    impl Driver for Fake {
        type Observation = &'static str;
        type Status = &'static str;
        type Effect = Fx;

        fn step(&mut self, o: &&'static str) -> (&'static str, Vec<Fx>) {
            self.log.push(format!("step {o}"));
            (o, self.script.get(o).cloned().unwrap_or_default())
        }

        fn precedes_status(e: &Fx) -> bool {
            e.before
        }

        fn needs_stored_status(e: &Fx) -> bool {
            e.stored
        }

        async fn before_status(&mut self, e: Fx) -> Result<(), Error> {
            self.log.push(format!("before {}", e.name));
            Ok(())
        }

        fn stage(&mut self, st: &'static str) {
            self.staged = Some(st);
        }

        async fn flush(&mut self) -> Result<(), Error> {
            let Some(st) = self.staged.take() else {
                return Ok(());
            };
            self.log.push(format!("write {st}"));
            if self.fail_write_of == Some(st) {
                return Err(Error::NotStored(st.into()));
            }
            Ok(())
        }

        async fn perform(&mut self, e: Fx) -> Result<Vec<&'static str>, Error> {
            self.log.push(format!("perform {}", e.name));
            Ok(e.follow)
        }

        fn again_at_once(&mut self) {
            self.again = true;
        }
    }

    #[test]
    fn the_status_is_written_after_what_precedes_it_and_before_every_other_effect() {
        let mut d = Fake::default();
        let copy = Fx {
            before: true,
            ..fx("annotate", &[])
        };
        d.script
            .insert("ran", vec![fx("release", &[]), copy, fx("job", &[])]);
        block_on(drive(&mut d, vec!["ran"], "pass")).unwrap();
        assert_eq!(
            d.log,
            [
                "step ran",
                "before annotate",
                "write ran",
                "perform release",
                "perform job",
                "step pass",
                "write pass",
            ]
        );
        assert!(!d.again);
    }

    #[test]
    fn follow_ups_are_stepped_before_what_was_gathered_in_their_order() {
        let mut d = Fake::default();
        d.script.insert(
            "claimed",
            vec![fx("lease", &["leased"]), fx("snapshot", &["taken"])],
        );
        d.script.insert("leased", vec![fx("job", &["created"])]);
        block_on(drive(&mut d, vec!["claimed", "gathered"], "pass")).unwrap();
        let steps: Vec<&str> = d
            .log
            .iter()
            .filter_map(|l| l.strip_prefix("step "))
            .collect();
        assert_eq!(
            steps,
            ["claimed", "leased", "created", "taken", "gathered", "pass"]
        );
    }

    #[test]
    fn steps_whose_effects_need_nothing_stored_share_the_next_write() {
        let mut d = Fake::default();
        // Pass → snapshot taken → claim written before its Job: one write.
        d.script
            .insert("pass", vec![unstored("snapshot", &["taken"])]);
        d.script.insert(
            "taken",
            vec![unstored("event", &[]), fx("job", &["created"])],
        );
        block_on(drive(&mut d, vec![], "pass")).unwrap();
        assert_eq!(
            d.log,
            [
                "step pass",
                "perform snapshot",
                "step taken",
                "perform event",
                "write taken",
                "perform job",
                "step created",
                "write created",
            ]
        );
    }

    #[test]
    fn a_pass_whose_steps_need_nothing_stored_still_writes_its_last_status() {
        let mut d = Fake::default();
        d.script
            .insert("pass", vec![unstored("lease", &["leased"])]);
        block_on(drive(&mut d, vec![], "pass")).unwrap();
        assert_eq!(
            d.log,
            ["step pass", "perform lease", "step leased", "write leased"]
        );
    }

    #[test]
    fn the_step_limit_ends_the_pass_and_asks_for_the_next_at_once() {
        let mut d = Fake::default();
        // A machine that always asks again: the loop must still end.
        d.script.insert("again", vec![fx("requeue", &["again"])]);
        block_on(drive(&mut d, vec!["again"], "pass")).unwrap();
        let steps = d.log.iter().filter(|l| l.starts_with("step ")).count();
        assert_eq!(steps, MAX_STEPS);
        assert!(d.again, "the rest waits for a pass that comes at once");
        assert!(!d.log.contains(&"step pass".to_string()));
    }

    #[test]
    fn a_failed_status_write_performs_nothing_after_it() {
        let mut d = Fake {
            fail_write_of: Some("claimed"),
            ..Fake::default()
        };
        d.script.insert("claimed", vec![fx("job", &["created"])]);
        assert!(block_on(drive(&mut d, vec!["claimed"], "pass")).is_err());
        assert_eq!(d.log, ["step claimed", "write claimed"]);
    }
}
