//! One watch per kind for the whole manager, shared by both families: each
//! kind's reflector store is what a pass reads (the realm census, approvals,
//! acknowledgments, a resource's ended Jobs), and its subscribers are what
//! wake the controllers. ConfigMaps are watched by their metadata only: a
//! pass needs to know one changed, and reads the few it names.

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
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

use super::flux::{GitRepository, OCIRepository};

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
    /// Flux's source objects, when Flux's source API is served.
    pub flux: Option<FluxStores>,
}

/// Flux's `GitRepository` and `OCIRepository` objects, as the watch keeps
/// them (metadata and the artifact's revision): what tells a pass Flux has
/// another artifact.
#[derive(Clone)]
pub struct FluxStores {
    /// `GitRepository` objects.
    pub git: Store<GitRepository>,
    /// `OCIRepository` objects.
    pub oci: Store<OCIRepository>,
}

impl FluxStores {
    /// The UID and artifact revision of the object `source` names in `ns`,
    /// as last watched; `None` while it has no artifact.
    pub fn artifact(
        &self,
        ns: &str,
        source: &crate::api::source::FluxSource,
    ) -> Option<(String, String)> {
        use crate::api::source::FluxSourceKind;
        match source.kind {
            FluxSourceKind::GitRepository => {
                let obj = self
                    .git
                    .get(&reflector::ObjectRef::new(&source.name).within(ns))?;
                super::flux::watched_artifact(&*obj, obj.status.as_ref())
            }
            FluxSourceKind::OCIRepository => {
                let obj = self
                    .oci
                    .get(&reflector::ObjectRef::new(&source.name).within(ns))?;
                super::flux::watched_artifact(&*obj, obj.status.as_ref())
            }
        }
    }
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
    /// Flux's `GitRepository` and `OCIRepository` objects, when served.
    pub flux: Option<(ReflectHandle<GitRepository>, ReflectHandle<OCIRepository>)>,
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

/// Whether Flux's source objects can be watched: the API
/// (`source.toolkit.fluxcd.io/v1`) is served and the manager may list both
/// kinds (in `ns`, or everywhere). Otherwise a Flux source's new artifact is
/// read at the interval; a manager started before Flux watches once
/// restarted.
pub async fn flux_watchable(client: &Client, ns: Option<&str>) -> Result<(), String> {
    let served = kube::discovery::group(client, super::flux::GROUP)
        .await
        .is_ok_and(|g| g.versions().any(|v| v == super::flux::VERSION));
    if !served {
        return Err(format!("{} is not served", super::flux::GROUP));
    }
    let one = kube::api::ListParams::default().limit(1);
    let git: Api<GitRepository> = api(client, ns);
    let oci: Api<OCIRepository> = api(client, ns);
    git.list_metadata(&one)
        .await
        .map_err(|e| format!("listing GitRepositories: {e}"))?;
    oci.list_metadata(&one)
        .await
        .map_err(|e| format!("listing OCIRepositories: {e}"))?;
    Ok(())
}

/// Sets up one watch per kind (in `ns`, or everywhere) and its subscribers;
/// Flux's source objects too when `flux` (they are served).
pub fn start(client: &Client, ns: Option<&str>, flux: bool) -> Shared {
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
    let (flux, flux_subs) = if flux {
        let (git, [g1, g2]) = share(w, api(client, ns), cfg(), trim);
        let (oci, [o1, o2]) = share(w, api(client, ns), cfg(), trim);
        (Some(FluxStores { git, oci }), Some(((g1, o1), (g2, o2))))
    } else {
        (None, None)
    };
    let (flux_schemas, flux_migrations) = match flux_subs {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
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
            flux,
        },
        schemas: Subscribers {
            resources: schema_sub,
            approvals: sa,
            jobs: j1,
            config_maps: c1,
            realms: r1,
            flux: flux_schemas,
        },
        migrations: Subscribers {
            resources: migration_sub,
            approvals: ma,
            jobs: j2,
            config_maps: c2,
            realms: r2,
            flux: flux_migrations,
        },
        acknowledgments: ack,
        watches,
    }
}

/// The realm Leases of `coordination_namespace`, watched into a store of
/// their own. No controller wakes on them, so nothing holds the watch back;
/// `freed` is told of each Lease released or deleted (`true`).
pub fn realm_leases(
    client: &Client,
    coordination_namespace: &str,
    freed: impl Fn(&Lease, bool) + Send + 'static,
) -> (Store<Lease>, Watch) {
    let (store, writer) = reflector::store();
    let api = Api::<Lease>::namespaced(client.clone(), coordination_namespace);
    let cfg = watcher::Config::default().labels(&crate::execution::lease::Leases::selector());
    let watch = watcher(api, cfg)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .for_each(move |e| {
            match &e {
                Ok(watcher::Event::Apply(lease)) => freed(lease, false),
                Ok(watcher::Event::Delete(lease)) => freed(lease, true),
                _ => {}
            }
            log_error("Lease", e.err())
        });
    (store, Box::pin(watch))
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
        if let Some(flux) = &self.flux {
            let _ = futures::join!(flux.git.wait_until_ready(), flux.oci.wait_until_ready());
        }
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
