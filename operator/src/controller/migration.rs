//! PtahMigration as a [`Family`] of the one pass: its machine
//! (`lifecycle::migration`), History and Run results, sequence plans, and
//! acknowledgments of unresolved runs, with the unresolved-run annotation
//! copy written before the status that sets the hold, so a restore that
//! drops status still holds the resource.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};

use super::family::Pass;
use super::family::{Family, named_snapshots};
use super::harvest;
use super::migration_harvest::{run_report, verdict};
use super::{Error, kube_err, migration_dispatch};
use crate::api::annotations::{MIGRATION_FINALIZER, UNRESOLVED_RUN};
use crate::api::approval::PtahMigrationApproval;
use crate::api::common::ApplyPolicy;
use crate::api::condition::{MigrationConditionType, MigrationPhase, Reason};
use crate::api::migration::{PtahMigration, PtahMigrationSpec, PtahMigrationStatus};
use crate::api::status::{ActiveOperation, OperationType};
use crate::api::trace::Stage;
use crate::execution::job::JobInput;
use crate::execution::migration_plan::{self, PlanRequest};
use crate::execution::receiver::StoredResult;
use crate::lifecycle::migration::{AcknowledgmentSeen, Effect, Observation, annotation_copy};
use crate::lifecycle::realm;
use crate::protocol::migrations::{check_history, check_run};
use crate::protocol::result::StepOutput;
use crate::telemetry::change::Where;

impl Family for PtahMigration {
    super::family::family_fields!(
        kind: "PtahMigration",
        spec: PtahMigrationSpec,
        status: PtahMigrationStatus,
        machine: migration,
        claimant: realm::claimant_of_migration,
        approval: PtahMigrationApproval,
        finalizer: MIGRATION_FINALIZER,
        stores: migrations,
        approvals_in: migration_approvals,
        jobs_of: migration_dispatch::jobs_of,
        awaiting_approval: MigrationPhase::AwaitingApproval,
        ready: MigrationConditionType::Ready,
    );

    fn change_at(&self, st: &PtahMigrationStatus) -> Where {
        use MigrationPhase as P;
        match st.phase {
            None | Some(P::InSync | P::Blocked | P::Failed) => Where::Rest,
            // Under `apply: Never` a published plan is where it rests.
            Some(P::Planning)
                if self.spec.policy.apply == ApplyPolicy::Never
                    && st.active_operation.is_none() =>
            {
                Where::Rest
            }
            Some(P::Resolving | P::Verifying | P::Reading) => Where::In(Stage::Source),
            Some(P::Planning) => Where::In(Stage::Plan),
            Some(P::AwaitingApproval) => Where::In(Stage::Decision),
            Some(P::Applying) => Where::In(Stage::Execution),
            Some(P::VerifyingHistory) => Where::In(Stage::Verification),
            Some(P::Pending | P::Suspended) => Where::Hold,
        }
    }

    fn precedes_status(e: &Effect) -> bool {
        e.precedes_status()
    }

    /// A migration suspended, or held on an unresolved run.
    fn inputs_wait(&self, st: &PtahMigrationStatus) -> bool {
        self.spec.suspend
            || matches!(
                st.phase,
                Some(MigrationPhase::Suspended | MigrationPhase::Blocked)
            ) && st.active_operation.is_none()
                && st.unresolved_run.is_some()
    }

    fn waits_for_lease(c: &ActiveOperation) -> bool {
        c.type_ == OperationType::Apply
    }

    fn snapshots_named(st: &PtahMigrationStatus) -> Vec<String> {
        named_snapshots(
            st.source.as_ref(),
            [st.active_operation.as_ref().and_then(|c| c.source.as_ref())],
        )
    }

    /// A dispatched run nobody can read: never dispatched again.
    fn apply_without_result(_job: &Job) -> Observation {
        Observation::JobLost
    }

    async fn harvest(
        _pass: &mut Pass<'_, Self>,
        c: &ActiveOperation,
        r: StoredResult,
    ) -> Result<Observation, Error> {
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

    /// A stamped acknowledgment of the unresolved run: only one admission
    /// stamped counts, it names who settled it.
    async fn own_observations(
        pass: &mut Pass<'_, Self>,
        st: &PtahMigrationStatus,
    ) -> Result<Vec<Observation>, Error> {
        let Some(run) = &st.unresolved_run else {
            return Ok(Vec::new());
        };
        let uid = pass.uid();
        let ns = pass.ns.as_str();
        let kind = <crate::api::PtahMigrationRunAcknowledgment as kube::Resource>::kind(&());
        let of_run = pass.ctx.stores().acknowledgments.state_filter(|a| {
            a.metadata.namespace.as_deref() == Some(ns)
                && a.spec.migration_ref.uid == uid
                && a.spec.operation_id == run.operation_id
                && a.spec.acknowledged_by.is_some()
        });
        let (found, unsigned): (Vec<_>, Vec<_>) = of_run
            .into_iter()
            .partition(|a| pass.ctx.stamp_key.verify(&kind, ns, &a.spec).is_ok());
        if found.is_empty()
            && let Some(a) = unsigned.first()
        {
            // Said on every pass that finds it, so Events dedupe it.
            let message = format!(
                "acknowledgment {} settles nothing: its stamp carries no signature of this operator's admission webhook; create it again through the API server with the operator's webhooks registered",
                a.name_any()
            );
            super::runtime::event(pass.ctx, &pass.obj, true, Reason::StampNotSigned, message).await;
        }
        let found = found.into_iter().next();
        Ok(found
            .map(|a| {
                Observation::Acknowledged(AcknowledgmentSeen {
                    name: a.name_any(),
                    uid: a.metadata.uid.clone().unwrap_or_default(),
                    operation_id: a.spec.operation_id.clone(),
                    acknowledged_by: a.spec.acknowledged_by.clone(),
                })
            })
            .into_iter()
            .collect())
    }

    /// An Apply carries the sequence of the plan it names.
    async fn job_input(pass: &mut Pass<'_, Self>, c: &ActiveOperation) -> Result<JobInput, String> {
        let plan = match (&c.plan_name, &c.plan_fingerprint) {
            (Some(name), Some(fingerprint)) if c.type_ == OperationType::Apply => {
                migration_plan::read(&pass.ctx.client, &pass.obj, name, fingerprint)
                    .await
                    .ok()
            }
            _ => None,
        };
        migration_dispatch::job_input(&pass.obj, c, &pass.ctx.config, plan.as_ref())
            .map_err(|e| e.to_string())
    }

    async fn perform_before(pass: &mut Pass<'_, Self>, e: Effect) -> Result<(), Error> {
        if let Effect::WriteUnresolvedAnnotation(run) = e {
            let copy = annotation_copy(&run).map_err(Error::UnresolvedCopy)?;
            annotate(pass, Some(copy)).await?;
        }
        Ok(())
    }

    async fn perform_own(pass: &mut Pass<'_, Self>, e: Effect) -> Result<Vec<Observation>, Error> {
        Ok(match e {
            e @ Effect::PublishPlan { .. } => {
                pass.plans_moved = true;
                vec![publish(pass, &e).await?]
            }
            Effect::ClearUnresolvedAnnotation => {
                annotate(pass, None).await?;
                Vec::new()
            }
            // Written before the status; nothing left to do after it.
            _ => Vec::new(),
        })
    }

    async fn collect_plans(pass: &mut Pass<'_, Self>) -> Result<(), Error> {
        let keep = migration_plan::still_named(&pass.status());
        migration_plan::collect(&pass.ctx.client, &pass.obj, &keep).await?;
        Ok(())
    }
}

/// Sets or removes the annotation copy of the unresolved run.
async fn annotate(pass: &mut Pass<'_, PtahMigration>, value: Option<String>) -> Result<(), Error> {
    if pass.obj.annotations().get(UNRESOLVED_RUN) == value.as_ref() {
        return Ok(());
    }
    let name = pass.name();
    let patch = serde_json::json!({"metadata": {"annotations": {UNRESOLVED_RUN: value}}});
    let stored = pass
        .api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!(
            "writing the unresolved-run copy of {name}"
        )))?;
    // Keep the status as this pass knows it; only metadata moved.
    pass.obj.metadata = stored.metadata;
    Ok(())
}

/// The plan request a publish effect carries; `None` for any other effect.
fn plan_request(effect: &Effect) -> Option<PlanRequest> {
    match effect {
        Effect::PublishPlan {
            migrations,
            history_fingerprint,
            target_identity_digest,
        } => Some(PlanRequest {
            migrations: migrations.clone(),
            history_fingerprint: history_fingerprint.clone(),
            target_identity_digest: target_identity_digest.clone(),
        }),
        _ => None,
    }
}

/// Stores the sequence plan the machine asked for.
async fn publish(pass: &Pass<'_, PtahMigration>, effect: &Effect) -> Result<Observation, Error> {
    let Some(request) = plan_request(effect) else {
        return Ok(Observation::Pass);
    };
    Ok(
        match migration_plan::publish(&pass.ctx.client, &pass.obj, &request).await {
            Ok(published) => Observation::PlanPublished(published.summary),
            Err(e) if e.is_transient() => {
                return Err(Error::MigrationPlan(e));
            }
            Err(e) => Observation::PlanNotPublished {
                message: e.to_string(),
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::plan::PlannedMigration;

    fn planned(version: i64) -> PlannedMigration {
        PlannedMigration {
            version,
            version_key: None,
            description: Some(format!("m{version}")),
            checksum: format!("h1:{version}"),
            checkpoint: false,
            transaction_mode: None,
        }
    }

    #[test]
    fn the_request_comes_from_the_publish_effect_only() {
        let digest = format!("sha256:{}", "03".repeat(32));
        let effect = Effect::PublishPlan {
            migrations: vec![planned(6)],
            history_fingerprint: Some(digest.clone()),
            target_identity_digest: None,
        };
        let r = plan_request(&effect).expect("a request");
        assert_eq!(r.migrations, vec![planned(6)]);
        assert_eq!(r.history_fingerprint, Some(digest));
        assert!(plan_request(&Effect::TakeSnapshot).is_none());
    }
}
