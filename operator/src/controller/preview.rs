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
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, dispatch, kube_err, migration_dispatch, runtime};
use crate::api::migration::PtahMigration;
use crate::api::schema::PtahSchema;
use crate::api::status::ActiveOperation;
use crate::execution::job::{OwnerKind, build_job};
use crate::execution::preview::{self, ANNOTATION_PREVIEW_REFUSED, ANNOTATION_PREVIEW_UID, PREVIEW_LABEL, Request};

/// Runs the preview controller until its watch ends.
pub async fn run(ctx: Arc<Context>) {
    let api: Api<ConfigMap> = match &ctx.config.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let previews = watcher::Config::default().labels(&format!("{PREVIEW_LABEL}=true"));
    Controller::new(api, previews)
        .shutdown_on_signal()
        .run(reconcile, |_, error, _| {
            tracing::warn!(%error, "preview pass failed");
            Action::requeue(Duration::from_secs(5))
        }, ctx)
        .for_each(|_| async {})
        .await;
}

/// Creates the preview's Job once, or says why not.
async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, Error> {
    let refused_before = cm
        .annotations()
        .contains_key(ANNOTATION_PREVIEW_REFUSED);
    if cm.meta().deletion_timestamp.is_some() || refused_before {
        return Ok(Action::await_change());
    }
    let ns = cm.namespace().unwrap_or_default();
    let request = match preview::request_of(&cm) {
        Ok(r) => r,
        Err(e) => return refuse(&ctx, &cm, &e.to_string()).await,
    };
    let claim = preview::claim(&request);
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

/// The resource's Job for the preview's claim, or why there is none.
async fn preview_job(
    ctx: &Context,
    r: &Request,
    claim: &ActiveOperation,
) -> Result<Result<Job, String>, Error> {
    let named = format!("{} {}/{}", r.kind.kind(), r.namespace, r.resource);
    let gone = || Ok(Err(format!("{named} does not exist")));
    let moved = |uid: Option<&String>| {
        (uid != Some(&r.resource_uid)).then(|| {
            format!(
                "metadata.annotations[{ANNOTATION_PREVIEW_UID}]: is not the UID of {named}, \
                 which was deleted and made again; preview again"
            )
        })
    };
    let input = match r.kind {
        OwnerKind::PtahSchema => {
            let api: Api<PtahSchema> = Api::namespaced(ctx.client.clone(), &r.namespace);
            let Some(mut s) = api
                .get_opt(&r.resource)
                .await
                .map_err(kube_err(format!("reading {named}")))?
            else {
                return gone();
            };
            if let Some(why) = moved(s.metadata.uid.as_ref()) {
                return Ok(Err(why));
            }
            s.spec.source = preview::source(r);
            dispatch::job_input(&s, claim, &ctx.config)
        }
        OwnerKind::PtahMigration => {
            let api: Api<PtahMigration> = Api::namespaced(ctx.client.clone(), &r.namespace);
            let Some(mut m) = api
                .get_opt(&r.resource)
                .await
                .map_err(kube_err(format!("reading {named}")))?
            else {
                return gone();
            };
            if let Some(why) = moved(m.metadata.uid.as_ref()) {
                return Ok(Err(why));
            }
            m.spec.source = preview::source(r);
            migration_dispatch::job_input(&m, claim, &ctx.config, None)
        }
    };
    let built = input
        .map_err(|e| e.to_string())
        .and_then(|input| build_job(&input).map_err(|e| e.to_string()));
    Ok(built.map(|job| preview::job(r, job, &claim.operation_id)))
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
