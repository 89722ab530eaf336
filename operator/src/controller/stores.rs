//! One watch per kind for the whole manager, shared by both families: each
//! kind's reflector store is what a pass reads (the realm census, approvals,
//! acknowledgments, a resource's ended Jobs), and its subscribers are what
//! wake the controllers. ConfigMaps are watched by their metadata only: a
//! pass needs to know one changed, and reads the few it names.
//!
//! The watch hands each event's object to every subscriber itself, not
//! through kube-runtime's shared store (`store_shared`): a subscriber of that
//! looks each object up in the store when it takes the event, and one
//! deleted meanwhile (a harvested Job at its TTL, a result ConfigMap) leaves
//! it pending with nothing to wake it. Its buffer then fills, the watch
//! waits for it, and the store stops: at 100 schemas the Job store stood
//! still seven minutes in, once the first harvested Jobs were deleted, and
//! every Job was read from the API server from then on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
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

/// The objects of one kind's watch, as one subscriber takes them: every
/// object applied, listed or deleted. The channel is unbounded: the
/// controllers take as fast as the watch gives, and a watch that waited for
/// a subscriber stopped its store with it.
pub type Subscriber<K> = mpsc::UnboundedReceiver<Arc<K>>;

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
    pub resources: Subscriber<K>,
    /// Its approvals.
    pub approvals: Subscriber<A>,
    /// The Jobs.
    pub jobs: Subscriber<Job>,
    /// ConfigMaps.
    pub config_maps: Subscriber<PartialObjectMeta<ConfigMap>>,
    /// PtahRealms.
    pub realms: Subscriber<PtahRealm>,
    /// Flux's `GitRepository` and `OCIRepository` objects, when served.
    pub flux: Option<(Subscriber<GitRepository>, Subscriber<OCIRepository>)>,
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
    pub acknowledgments: Subscriber<PtahMigrationRunAcknowledgment>,
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
) -> (Store<K>, [Subscriber<K>; N])
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let channels: [_; N] = std::array::from_fn(|_| mpsc::unbounded());
    let senders: Vec<_> = channels.iter().map(|(tx, _)| tx.clone()).collect();
    let subs = channels.map(|(_, rx)| rx);
    let kind = K::kind(&()).to_string();
    // An `Api` of `PartialObjectMeta` lists and watches metadata only.
    watches.push(Box::pin(
        watcher(api, cfg)
            .default_backoff()
            .modify(keep)
            .reflect(writer)
            .for_each(move |e| {
                if let Ok(event) = &e {
                    hand_out(&senders, event);
                }
                log_error(&kind, e.err())
            }),
    ));
    (store, subs)
}

/// Gives the object of `event` (applied, listed or deleted) to every
/// subscriber; a subscriber gone (its controller stopped) is skipped.
fn hand_out<K: Clone>(senders: &[mpsc::UnboundedSender<Arc<K>>], event: &watcher::Event<K>) {
    let obj = match event {
        watcher::Event::Apply(obj)
        | watcher::Event::InitApply(obj)
        | watcher::Event::Delete(obj) => Arc::new(obj.clone()),
        watcher::Event::Init | watcher::Event::InitDone => return,
    };
    for sender in senders {
        let _ = sender.unbounded_send(obj.clone());
    }
}

fn log_error(kind: &str, e: Option<watcher::Error>) -> futures::future::Ready<()> {
    if let Some(e) = e {
        tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
    }
    futures::future::ready(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> Job {
        let mut j = Job::default();
        j.metadata.name = Some(name.into());
        j.metadata.namespace = Some("ns".into());
        j
    }

    /// kube-runtime's shared subscriber looked each object up in the store
    /// when it took the event: a Job deleted before then left it pending for
    /// good, and the watch stopped once its buffer was full. Each
    /// subscriber here holds the objects themselves, the deleted one too.
    #[test]
    fn every_subscriber_gets_each_object_applied_listed_or_deleted() {
        let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..2).map(|_| mpsc::unbounded()).unzip();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(job("listed")),
            watcher::Event::InitDone,
            watcher::Event::Apply(job("harvested")),
            watcher::Event::Delete(job("harvested")),
        ] {
            hand_out(&senders, &event);
        }
        drop(senders);
        for rx in &mut receivers {
            let names: Vec<String> = futures::executor::block_on_stream(rx)
                .map(|j| j.metadata.name.clone().unwrap_or_default())
                .collect();
            assert_eq!(names, ["listed", "harvested", "harvested"]);
        }
    }

    /// Why the watch does not use kube-runtime's shared subscribers (5.0):
    /// one that takes an object deleted from the store since answers
    /// pending with nothing left to wake it, though the next object waits.
    /// Should this fail, kube-runtime has mended it.
    #[test]
    fn kube_runtimes_shared_subscriber_stops_at_an_object_deleted_meanwhile() {
        use futures::task::{Context, noop_waker_ref};
        let (_store, writer) = reflector::store_shared::<Job>(16);
        let mut subscriber = writer.subscribe().expect("a shared store subscribes");
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(job("harvested"))),
            Ok(watcher::Event::Delete(job("harvested"))),
            Ok(watcher::Event::Apply(job("next"))),
        ]);
        futures::executor::block_on(reflector::reflector(writer, events).for_each(|_| async {}));
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(
            subscriber.poll_next_unpin(&mut cx).is_pending(),
            "the deleted Job's event answers pending, though `next` is ready behind it"
        );
    }

    #[test]
    fn a_subscriber_gone_holds_nothing_back() {
        let (tx_gone, rx_gone) = mpsc::unbounded();
        let (tx, mut rx) = mpsc::unbounded();
        drop(rx_gone);
        hand_out(&[tx_gone, tx], &watcher::Event::Apply(job("a")));
        let got = rx.try_recv().expect("an object, ready");
        assert_eq!(got.metadata.name.as_deref(), Some("a"));
    }
}
