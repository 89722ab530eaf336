//! PtahSchema as a [`Family`] of the one pass: its machine
//! (`lifecycle::schema`), its target's identity in status, its plans (a Plan
//! result's bytes published as a PtahSchemaPlan, marked published, collected
//! once status no longer names them), a settled Apply, and the proof an
//! Apply owes.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use super::family::Pass;
use super::family::{Family, named_snapshots};
use super::harvest::{self, Harvest};
use super::{Error, dispatch, kube_err, runtime};
use crate::api::annotations::{SCHEMA_FINALIZER, SETTLED_APPLY};
use crate::api::approval::PtahSchemaApproval;
use crate::api::condition::SchemaConditionType;
use crate::api::condition::{ConditionStatus, Reason, SchemaPhase, SchemaPlanConditionType};
use crate::api::plan::PtahSchemaPlan;
use crate::api::schema::{PtahSchema, PtahSchemaSpec, PtahSchemaStatus, TargetStatus};
use crate::api::status::{ActiveOperation, OperationType};
use crate::api::trace::Stage;
use crate::execution::job::JobInput;
use crate::execution::plan;
use crate::execution::receiver::StoredResult;
use crate::lifecycle::conditions;
use crate::lifecycle::realm;
use crate::lifecycle::schema::policy::protected;
use crate::lifecycle::schema::{Effect, Observation, PlanVerdict};
use crate::protocol::database::PlanOutcome;
use crate::runner::reports::first_destructive;
use crate::telemetry::change::Where;

impl Family for PtahSchema {
    super::family::family_fields!(
        kind: "PtahSchema",
        spec: PtahSchemaSpec,
        status: PtahSchemaStatus,
        machine: schema,
        claimant: realm::claimant_of_schema,
        approval: PtahSchemaApproval,
        finalizer: SCHEMA_FINALIZER,
        stores: schemas,
        approvals_in: schema_approvals,
        jobs_of: dispatch::jobs_of,
        awaiting_approval: SchemaPhase::AwaitingApproval,
        ready: SchemaConditionType::Ready,
    );

    fn change_at(&self, st: &PtahSchemaStatus) -> Where {
        use SchemaPhase as P;
        match st.phase {
            None | Some(P::InSync | P::Blocked | P::Failed) => Where::Rest,
            Some(P::Resolving | P::Verifying | P::Observing) => Where::In(Stage::Source),
            Some(P::Planning) => Where::In(Stage::Plan),
            Some(P::ReadyToApply | P::AwaitingApproval) => Where::In(Stage::Decision),
            Some(P::Applying) => Where::In(Stage::Execution),
            Some(P::VerifyingConvergence) => Where::In(Stage::Verification),
            Some(P::Pending | P::Suspended) => Where::Hold,
        }
    }

    /// The target's engine and coordination identity: the machine reads
    /// them from status, only the controller derives them.
    fn prepare(pass: &mut Pass<'_, Self>) {
        let engine = pass.obj.spec.target.engine.clone();
        let digest = realm::coordination_digest(&engine, &pass.ns, &pass.obj.spec.target);
        let st = pass.obj.status.get_or_insert_with(Default::default);
        let target = st.target.get_or_insert_with(TargetStatus::default);
        target.engine = Some(
            crate::api::common::DatabaseEngine::from_spec(&engine)
                .map(|e| e.canonical().to_string())
                .unwrap_or_else(|| engine.to_ascii_lowercase()),
        );
        target.coordination_digest = digest;
    }

    /// A schema waiting on its engine, its realm or a resume.
    fn inputs_wait(&self, st: &PtahSchemaStatus) -> bool {
        self.spec.suspend
            || st.phase == Some(SchemaPhase::Suspended)
            || matches!(
                conditions::get(&st.conditions, SchemaConditionType::Stalled).map(|c| c.reason),
                Some(
                    Reason::RealmConflict | Reason::RealmNotAuthorized | Reason::UnsupportedEngine
                )
            ) && st.phase == Some(SchemaPhase::Blocked)
    }

    fn waits_for_lease(c: &ActiveOperation) -> bool {
        matches!(c.type_, OperationType::Plan | OperationType::Apply)
    }

    /// A plan applied without an approval (or approved already): its
    /// Apply is claimed at the next pass.
    fn apply_follows(st: &PtahSchemaStatus) -> bool {
        st.phase == Some(SchemaPhase::ReadyToApply) && st.active_operation.is_none()
    }

    /// The proof reads under the Apply's Lease: it was acquired for the
    /// Apply's operation, which the owed proof records.
    fn lease_holder<'s>(st: &'s PtahSchemaStatus, c: &'s ActiveOperation) -> &'s str {
        st.pending_observation
            .as_ref()
            .filter(|p| p.lease_epoch.is_some() && p.lease_epoch == c.lease_epoch)
            .map_or(c.operation_id.as_str(), |p| p.apply_operation_id.as_str())
    }

    fn recorded_coordination(st: &PtahSchemaStatus) -> Option<String> {
        st.target
            .as_ref()
            .and_then(|t| t.coordination_digest.clone())
    }

    fn proof_owed(st: &PtahSchemaStatus) -> bool {
        st.pending_observation.is_some()
    }

    fn snapshots_named(st: &PtahSchemaStatus) -> Vec<String> {
        named_snapshots(
            st.source.as_ref(),
            [
                st.active_operation.as_ref().and_then(|c| c.source.as_ref()),
                st.pending_observation
                    .as_ref()
                    .and_then(|p| p.source.as_ref()),
            ],
        )
    }

    /// An Apply with an outcome nobody established: the proof decides.
    fn apply_without_result(job: &Job) -> Observation {
        Observation::ApplyEnded {
            reported_success: false,
            job_uid: job.metadata.uid.clone(),
        }
    }

    async fn harvest(
        pass: &mut Pass<'_, Self>,
        c: &ActiveOperation,
        r: StoredResult,
    ) -> Result<Observation, Error> {
        let bindings = runtime::bindings(pass.ctx, &pass.ns, &pass.obj.spec.source).await;
        let claimed = c.target_identity_digest.as_deref();
        let now = runtime::now();
        Ok(
            match harvest::from_result(c.type_, &r.document, r.job_uid, claimed, &bindings, &now) {
                Harvest::Observed(Observation::DriftObserved(mut t)) => {
                    // The machine replaces status.target: keep what only the
                    // controller knows.
                    let known = pass.status().target.unwrap_or_default();
                    t.engine = known.engine;
                    t.coordination_digest = known.coordination_digest;
                    Observation::DriftObserved(t)
                }
                Harvest::Observed(o) => o,
                Harvest::Publish(plan) => publish(pass, c, &plan).await?,
            },
        )
    }

    /// A settled Apply, once the annotation names the Apply a proof is owed for.
    async fn own_observations(
        pass: &mut Pass<'_, Self>,
        st: &PtahSchemaStatus,
    ) -> Result<Vec<Observation>, Error> {
        let settled = pass
            .obj
            .annotations()
            .get(SETTLED_APPLY)
            .zip(st.pending_observation.as_ref())
            .is_some_and(|(v, p)| *v == p.apply_operation_id);
        Ok(if settled && st.phase == Some(SchemaPhase::Blocked) {
            vec![Observation::SettledApply]
        } else {
            Vec::new()
        })
    }

    async fn job_input(pass: &mut Pass<'_, Self>, c: &ActiveOperation) -> Result<JobInput, String> {
        dispatch::job_input(&pass.obj, c, &pass.ctx.config).map_err(|e| e.to_string())
    }

    async fn perform_own(pass: &mut Pass<'_, Self>, e: Effect) -> Result<Vec<Observation>, Error> {
        if let Effect::PublishPlan { name } = e {
            pass.plans_moved = true;
            plan_ready(pass, &name).await?;
        }
        Ok(Vec::new())
    }

    /// Only what status still names stays: a retired plan's approvals
    /// authorize nothing, and the journal keeps its identity.
    async fn collect_plans(pass: &mut Pass<'_, Self>) -> Result<(), Error> {
        let keep = plan::still_named(&pass.status());
        plan::collect(&pass.ctx.client, &pass.obj, &keep).await?;
        Ok(())
    }
}

/// Publishes a Plan result's bytes as an immutable plan bound to what
/// the claim read; the machine decides what the plan's verdict is.
async fn publish(
    pass: &Pass<'_, PtahSchema>,
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
    let st = pass.status();
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
    match plan::publish(&pass.ctx.client, &pass.obj, input).await {
        Ok(published) => Ok(Observation::Planned(PlanVerdict::Changes {
            plan: Box::new(published.summary),
            protected_table: protected(&pass.obj.spec.policy.protected_tables, &change.tables),
            destructive_statement: first_destructive(&change.plan),
            target_identity_digest: Some(outcome.target_identity_digest.clone()),
        })),
        Err(e) if e.is_transient() => Err(Error::Plan(e)),
        Err(e) => failed(e.to_string()),
    }
}

/// Marks a published plan `Ready`.
async fn plan_ready(pass: &Pass<'_, PtahSchema>, name: &str) -> Result<(), Error> {
    let api: Api<PtahSchemaPlan> = Api::namespaced(pass.ctx.client.clone(), &pass.ns);
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
        &runtime::now(),
    );
    api.replace_status(name, &PostParams::default(), &plan)
        .await
        .map_err(kube_err(format!("marking PtahSchemaPlan {name} published")))?;
    Ok(())
}
