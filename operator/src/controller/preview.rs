//! Plan previews, the manager's side (`crate::execution::preview` has the
//! rules): for each preview ConfigMap, the resource's read-only Plan or
//! History Job, built from the resource's own spec with the preview's files
//! mounted where its snapshot would be, created once under the preview's
//! claim and owned by the preview. Nothing else is written: no status, no
//! Lease, no plan. A preview the manager will not run is annotated
//! [`ANNOTATION_PREVIEW_REFUSED`], naming the field or rule.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{Context, Error, dispatch, kube_err, migration_dispatch, runtime};
use crate::api::migration::PtahMigration;
use crate::api::schema::PtahSchema;
use crate::api::status::ActiveOperation;
use crate::execution::job::{OwnerKind, build_job};
use crate::execution::preview::{
    self, ANNOTATION_PREVIEW_REFUSED, ANNOTATION_PREVIEW_UID, PREVIEW_LABEL, Request,
};
use crate::lifecycle::common::{ClaimInputs, new_claim};

/// Runs the preview controller until its watch ends.
pub async fn run(ctx: Arc<Context>) {
    let api: Api<ConfigMap> = match &ctx.config.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let previews = watcher::Config::default().labels(&format!("{PREVIEW_LABEL}=true"));
    Controller::new(api, previews)
        .shutdown_on_signal()
        .run(
            reconcile,
            |_, error, _| {
                tracing::warn!(%error, "preview pass failed");
                Action::requeue(Duration::from_secs(5))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// Creates the preview's Job once, or says why not.
async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, Error> {
    let refused_before = cm.annotations().contains_key(ANNOTATION_PREVIEW_REFUSED);
    if cm.meta().deletion_timestamp.is_some() || refused_before {
        return Ok(Action::await_change());
    }
    let ns = cm.namespace().unwrap_or_default();
    let request = match preview::request_of(&cm) {
        Ok(r) => r,
        Err(e) => return refuse(&ctx, &cm, &e.to_string()).await,
    };
    let claim = claim(&request);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let name = preview::job_name(&claim.operation_id);
    if jobs
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading Job {ns}/{name}")))?
        .is_some()
    {
        return Ok(Action::await_change());
    }
    let job = match preview_job(&ctx, &request, &claim).await? {
        Ok(job) => job,
        Err(why) => return refuse(&ctx, &cm, &why).await,
    };
    runtime::publish_receiver_ca(&ctx, &ns).await?;
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => tracing::info!(preview = %request.name, job = %name, "preview Job created"),
        // Made by an earlier pass (or another replica): the same Job.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(kube_err(format!("creating Job {ns}/{name}"))(e)),
    }
    Ok(Action::await_change())
}

/// The preview's own claim, which no status holds: a Plan (a schema) or
/// History (a migration) of its files, under the preview's operation id
/// and Job name.
fn claim(r: &Request) -> ActiveOperation {
    let mut c = new_claim(
        ClaimInputs {
            owner: r.kind,
            resource: &r.resource,
            uid: &r.uid,
            generation: None,
            op: preview::operation(r.kind),
            source: Some(preview::binding(r)),
            execution_epoch: None,
            plan_fingerprint: None,
            coordination_digest: None,
            target_identity_digest: None,
        },
        &r.created,
    );
    c.operation_id = preview::operation_id(r);
    c.job_name = Some(preview::job_name(&c.operation_id));
    c
}

/// The resource's Job for the preview's claim, or why there is none.
async fn preview_job(
    ctx: &Context,
    r: &Request,
    claim: &ActiveOperation,
) -> Result<Result<Job, String>, Error> {
    let input = match r.kind {
        OwnerKind::PtahSchema => match previewed::<PtahSchema>(ctx, r).await? {
            Ok(mut s) => {
                s.spec.source = preview::source(r);
                dispatch::job_input(&s, claim, &ctx.config)
            }
            Err(why) => return Ok(Err(why)),
        },
        OwnerKind::PtahMigration => match previewed::<PtahMigration>(ctx, r).await? {
            Ok(mut m) => {
                m.spec.source = preview::source(r);
                migration_dispatch::job_input(&m, claim, &ctx.config, None)
            }
            Err(why) => return Ok(Err(why)),
        },
    };
    let built = input
        .map_err(|e| e.to_string())
        .and_then(|input| build_job(&input).map_err(|e| e.to_string()));
    Ok(built.map(|job| preview::job(r, job, &claim.operation_id)))
}

/// The resource the preview names, as stored, or why there is none to
/// preview.
async fn previewed<K>(ctx: &Context, r: &Request) -> Result<Result<K, String>, Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let named = format!("{} {}/{}", r.kind.kind(), r.namespace, r.resource);
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &r.namespace);
    let Some(obj) = api
        .get_opt(&r.resource)
        .await
        .map_err(kube_err(format!("reading {named}")))?
    else {
        return Ok(Err(format!("{named} does not exist")));
    };
    if obj.meta().uid.as_ref() != Some(&r.resource_uid) {
        return Ok(Err(format!(
            "metadata.annotations[{ANNOTATION_PREVIEW_UID}]: is not the UID of {named}, \
             which was deleted and made again; preview again"
        )));
    }
    Ok(Ok(obj))
}

/// Writes why the preview does not run; the plugin prints it.
async fn refuse(ctx: &Context, cm: &ConfigMap, why: &str) -> Result<Action, Error> {
    let (ns, name) = (cm.namespace().unwrap_or_default(), cm.name_any());
    tracing::info!(preview = %name, %why, "preview refused");
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"metadata": {"annotations": {ANNOTATION_PREVIEW_REFUSED: why}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!("annotating preview {ns}/{name}")))?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::OperationType;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn request(kind: OwnerKind) -> Request {
        Request {
            name: "ptah-preview-abcde".into(),
            namespace: "shop".into(),
            uid: "preview-uid".into(),
            kind,
            resource: "orders".into(),
            resource_uid: "res-uid".into(),
            content_digest: format!("sha256:{}", "c".repeat(64)),
            created: Time("2026-12-06T08:00:00Z".parse().expect("an instant")),
        }
    }

    #[test]
    fn a_previews_claim_reads_its_files_under_its_own_operation() {
        let r = request(OwnerKind::PtahSchema);
        let c = claim(&r);
        assert_eq!(c, claim(&r), "the same preview, the same claim");
        assert_eq!(c.type_, OperationType::Plan);
        assert_eq!(c.operation_id, preview::operation_id(&r));
        assert_eq!(c.job_name, Some(preview::job_name(&c.operation_id)));
        assert_eq!(c.source, Some(preview::binding(&r)));
        assert!(c.lease_epoch.is_none(), "a preview takes no realm Lease");
        let m = claim(&request(OwnerKind::PtahMigration));
        assert_eq!(m.type_, OperationType::History);
    }
}
