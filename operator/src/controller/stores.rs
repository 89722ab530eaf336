//! One watch per kind for the whole manager, shared by both families: each
//! kind's reflector store is what a pass reads (the realm census, approvals,
//! acknowledgments, a resource's ended Jobs), and its subscribers are what
//! wake the controllers. ConfigMaps are watched by their metadata only: a
//! pass needs to know one changed, and reads the few it names.

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::annotations::{LABEL_MANAGED_BY, MANAGED_BY};
use crate::api::approval::{
    PtahMigrationApproval, PtahMigrationRunAcknowledgment, PtahSchemaApproval,
};
use crate::api::migration::PtahMigration;
use crate::api::realm::PtahRealm;
use crate::api::schema::PtahSchema;

/// How many events a subscriber may trail its watch by before the watch
/// waits for it.
const SUBSCRIBER_BUFFER: usize = 1024;

/// What every pass reads instead of the API server.
#[derive(Clone)]
pub struct Stores {
    /// Every PtahSchema watched.
    pub schemas: Store<PtahSchema>,
    /// Every PtahMigration watched.
    pub migrations: Store<PtahMigration>,
    /// Every PtahRealm (cluster-scoped).
    pub realms: Store<PtahRealm>,
    /// Approvals of schema plans.
    pub schema_approvals: Store<PtahSchemaApproval>,
    /// Approvals of migration plans.
    pub migration_approvals: Store<PtahMigrationApproval>,
    /// Acknowledgments of unresolved runs.
    pub acknowledgments: Store<PtahMigrationRunAcknowledgment>,
    /// The Jobs this operator made.
    pub jobs: Store<Job>,
    /// ConfigMaps, metadata only.
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
}

/// The streams that wake one family's controller.
pub struct Subscribers<
    K: Resource<DynamicType = ()> + Clone + 'static,
    A: Resource<DynamicType = ()> + Clone + 'static,
> {
    /// Its resources.
    pub resources: ReflectHandle<K>,
    /// Its approvals.
    pub approvals: ReflectHandle<A>,
    /// The Jobs.
    pub jobs: ReflectHandle<Job>,
    /// ConfigMaps.
    pub config_maps: ReflectHandle<PartialObjectMeta<ConfigMap>>,
    /// PtahRealms.
    pub realms: ReflectHandle<PtahRealm>,
}

/// A watch to poll for as long as the manager runs.
pub type Watch = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Everything [`start`] sets up.
pub struct Shared {
    /// The stores.
    pub stores: Stores,
    /// What wakes the PtahSchema controller.
    pub schemas: Subscribers<PtahSchema, PtahSchemaApproval>,
    /// What wakes the PtahMigration controller.
    pub migrations: Subscribers<PtahMigration, PtahMigrationApproval>,
    /// What wakes the PtahMigration controller besides.
    pub acknowledgments: ReflectHandle<PtahMigrationRunAcknowledgment>,
    /// The watches, to poll.
    pub watches: Vec<Watch>,
}

/// Sets up one watch per kind (in `ns`, or everywhere) and its subscribers.
pub fn start(client: &Client, ns: Option<&str>) -> Shared {
    let mut watches = Vec::new();
    let cfg = watcher::Config::default;
    let w = &mut watches;
    let (schemas, [schema_sub]) = share(w, api(client, ns), cfg(), trim);
    let (migrations, [migration_sub]) = share(w, api(client, ns), cfg(), trim);
    let realm_api = Api::<PtahRealm>::all(client.clone());
    let (realms, [r1, r2]) = share(w, realm_api, cfg(), trim);
    let (schema_approvals, [sa]) = share(w, api(client, ns), cfg(), trim);
    let (migration_approvals, [ma]) = share(w, api(client, ns), cfg(), trim);
    let (acknowledgments, [ack]) = share(w, api(client, ns), cfg(), trim);
    let ours = cfg().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let (jobs, [j1, j2]) = share(w, api(client, ns), ours, trim_job);
    let (config_maps, [c1, c2]) = share(w, api(client, ns), cfg(), trim);
    Shared {
        stores: Stores {
            schemas,
            migrations,
            realms,
            schema_approvals,
            migration_approvals,
            acknowledgments,
            jobs,
            config_maps,
        },
        schemas: Subscribers {
            resources: schema_sub,
            approvals: sa,
            jobs: j1,
            config_maps: c1,
            realms: r1,
        },
        migrations: Subscribers {
            resources: migration_sub,
            approvals: ma,
            jobs: j2,
            config_maps: c2,
            realms: r2,
        },
        acknowledgments: ack,
        watches,
    }
}

impl Stores {
    /// Waits until every store holds its first full list: a census over a
    /// store still filling would miss a conflicting claim.
    pub async fn ready(&self) {
        let _ = futures::join!(
            self.schemas.wait_until_ready(),
            self.migrations.wait_until_ready(),
            self.realms.wait_until_ready(),
            self.schema_approvals.wait_until_ready(),
            self.migration_approvals.wait_until_ready(),
            self.acknowledgments.wait_until_ready(),
            self.jobs.wait_until_ready(),
            self.config_maps.wait_until_ready(),
        );
    }
}

/// The API of a namespaced kind: one namespace, or all.
pub fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What no pass reads is not kept: `managedFields` (`None`, so a status
/// written from a store copy leaves the server's as they are).
fn trim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// A Job as a pass reads it: metadata, status and its TTL, not its Pod
/// template (the largest part of it).
fn trim_job(job: &mut Job) {
    trim(job);
    if let Some(spec) = job.spec.as_mut() {
        spec.template = Default::default();
    }
}

fn share<K, const N: usize>(
    watches: &mut Vec<Watch>,
    api: Api<K>,
    cfg: watcher::Config,
    keep: fn(&mut K),
) -> (Store<K>, [ReflectHandle<K>; N])
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store_shared(SUBSCRIBER_BUFFER);
    let subs = std::array::from_fn(|_| writer.subscribe().expect("a shared store subscribes"));
    let kind = K::kind(&()).to_string();
    // An `Api` of `PartialObjectMeta` lists and watches metadata only.
    watches.push(Box::pin(
        watcher(api, cfg)
            .default_backoff()
            .modify(keep)
            .reflect_shared(writer)
            .for_each(move |e| log_error(&kind, e.err())),
    ));
    (store, subs)
}

fn log_error(kind: &str, e: Option<watcher::Error>) -> futures::future::Ready<()> {
    if let Some(e) = e {
        tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
    }
    futures::future::ready(())
}
