//! The controller: kube-runtime wiring around the pure lifecycles. For each
//! family (PtahSchema in `schema.rs`, PtahMigration in `migration.rs`) it
//! watches the resources, the Jobs they own, the ConfigMaps their sources and
//! policies name, and PtahRealms; on each pass it turns what it reads into
//! the family machine's observations, steps it, writes the status (claim,
//! journal, conditions in one write) and only then performs the effects:
//! snapshots, Leases, Jobs, plans, Events. The I/O both families share is
//! `runtime.rs`.
//!
//! The dispatch protocol (architecture.md, "The durable claim"): the claim
//! and its `dispatchStarted` marker are written before the one Job create; a
//! Job found under the reserved name is adopted, never created twice; the
//! Job's UID is recorded once it is known; a terminal Job's result is
//! harvested from the receiver's store (or, for a read, handed over by the
//! receiver in memory: [`Inbox`]) and the claim cleared in one status write;
//! only then is an Apply's Job given its cleanup TTL and its token Secret
//! and stored result deleted (a read's Job has its TTL from creation, and
//! its token Secret and stored result are owned by it). A manager killed
//! between any two of these writes finds, on restart, exactly what to do
//! next from the status.

mod dispatch;
mod error;
mod family;
mod flux;
use family::Family;
mod harvest;
mod inputs;
mod job_input;
pub mod leader;
mod migration;
mod migration_dispatch;
mod migration_harvest;
mod pass;
mod preview;
mod runtime;
mod schema;
mod stores;
mod turns;
mod versions;
pub use stores::Stores;

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;

use crate::api::status::OperationType;
use kube::{Client, ResourceExt};

use crate::api::approval::Approval;
use crate::api::source::FluxSourceKind;
use crate::api::status::{ExecutionBinding, OperationStatus};
use crate::execution::job::{Images, MANAGED_BY};
use crate::execution::lease::Leases;
use crate::execution::receiver::{Addressee, Inbox, TokenKey};

/// A place in the dispatch protocol where a test can stop the manager, right
/// after the durable write that precedes it (`--fault-point`, test-only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultPoint {
    /// The claim with `dispatchStarted` is written; no Job exists yet.
    AfterClaim,
    /// The Job is created; its UID is not recorded.
    AfterJobCreate,
    /// The Job's UID is recorded on an Apply's claim (a read's create has
    /// returned: its UID comes with its result).
    AfterJobUid,
    /// The harvested outcome is written; an Apply's Job is not yet given its
    /// TTL.
    AfterOutcome,
}

/// The exit code of a manager stopped at a fault point.
pub const FAULT_EXIT_CODE: i32 = 86;

/// How the manager runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The runner and executor images.
    pub images: Images,
    /// The receiver's URL, as Pods reach it.
    pub receiver_url: String,
    /// The namespace of the realm Leases.
    pub coordination_namespace: String,
    /// This manager's identity on Events and its leader Lease.
    pub holder: String,
    /// Who holds realm Leases: one identity for every replica and restart
    /// of one installation, so that the manager that takes over goes on
    /// under the Leases its predecessor took.
    pub realm_holder: String,
    /// The shortest a realm Lease lasts without renewal; each lasts at least
    /// its Job's deadline and a minute ([`crate::execution::lease::duration_for`]).
    pub lease_duration_seconds: i32,
    /// The execution components operations run under.
    pub execution: ExecutionBinding,
    /// The cleanup TTL a harvested Job is given.
    pub harvested_ttl_seconds: i32,
    /// How many passes of each family run at once, the others waiting their
    /// turn in order (unbounded, a cold start of 1,000 held 1,000 passes in
    /// memory).
    pub max_concurrent_reconciles: u16,
    /// Test-only: stop the process at this point of the protocol.
    pub fault_point: Option<FaultPoint>,
    /// Test-only: the fault point stops only at this operation's claim.
    pub fault_operation: Option<OperationType>,
    /// Test-only: the fault point lets this many matching writes pass
    /// before it stops (the fault suite's way to reach a proof's read).
    pub fault_skip: u32,
    /// Watch only this namespace (tests and single-namespace installs).
    pub watch_namespace: Option<String>,
}

/// What every pass shares.
pub struct Context {
    /// The manager's client.
    pub client: Client,
    /// How the manager runs.
    pub config: Config,
    /// The realm Leases.
    pub leases: Leases,
    /// The manager's key (the stamp key is derived from it).
    pub token_key: Arc<TokenKey>,
    /// Reads' results the receiver hands over without storing them.
    pub inbox: Arc<Inbox>,
    /// The passes woken to take a released realm Lease, which go before
    /// any turn.
    express: Arc<turns::Express<Addressee>>,
    /// The key admission signs stamps with (derived from the token key):
    /// an approval or acknowledgment it cannot verify counts for nothing.
    pub stamp_key: crate::admission::StampKey,
    /// The CA Pods trust the receiver by, published to each namespace (kept
    /// current as its file rotates).
    pub receiver_ca: Arc<std::sync::RwLock<String>>,
    /// Events.
    pub recorder: Recorder,
    /// Consecutive failed passes per object.
    pub backoff: error::Backoff,
    /// The shared watches' stores, once each holds its first list.
    stores: std::sync::OnceLock<Stores>,
    /// The resourceVersion of each resource as this manager last read or
    /// wrote it: a store copy of another version may trail our own write.
    versions: versions::ByVersion<()>,
    /// What source ConfigMaps' selected keys gave: (UID, content digest).
    contents: versions::ByVersion<(String, String)>,
    /// When each long-running Job was last read past its store.
    job_reads: crate::execution::paced::Paced,
    /// Traces and metrics.
    pub telemetry: Telemetry,
    /// How many writes matching the fault point have passed.
    faults_passed: std::sync::atomic::AtomicU32,
}

/// Where the manager's spans go, what its Jobs are told of it, and its
/// metrics.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// The stage spans of changes (off unless `OTEL_*` says where).
    pub spans: crate::telemetry::export::Spans,
    /// The exporter variables Jobs get, so their spans go where these go.
    pub job_exporter: Vec<(String, String)>,
    /// The metrics `/metrics` serves.
    pub metrics: crate::telemetry::metrics::Metrics,
}

impl Context {
    /// A context for `config`.
    pub fn new(
        client: Client,
        config: Config,
        token_key: Arc<TokenKey>,
        inbox: Arc<Inbox>,
        receiver_ca: Arc<std::sync::RwLock<String>>,
    ) -> Self {
        let leases = Leases::new(
            client.clone(),
            &config.coordination_namespace,
            &config.realm_holder,
        );
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGED_BY.into(),
                instance: Some(config.holder.clone()),
            },
        );
        Context {
            client,
            config,
            leases,
            stamp_key: crate::admission::StampKey::of(&token_key),
            token_key,
            inbox,
            express: Default::default(),
            receiver_ca,
            recorder,
            backoff: error::Backoff::default(),
            stores: std::sync::OnceLock::new(),
            versions: Default::default(),
            contents: Default::default(),
            job_reads: crate::execution::paced::Paced::every(runtime::STORE_TRUSTED_RUNNING),
            telemetry: Telemetry::default(),
            faults_passed: Default::default(),
        }
    }

    /// With `telemetry` instead of none.
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The shared watches' stores; [`run`] sets them before any pass.
    pub fn stores(&self) -> &Stores {
        self.stores
            .get()
            .expect("the stores are set before the first pass")
    }

    /// Whether the store's copy of an object, at `version`, is the one this
    /// manager last read or wrote (or it has seen none since it started).
    fn current(&self, key: &str, version: Option<&str>) -> bool {
        self.versions
            .version(key)
            .is_none_or(|v| Some(v.as_str()) == version)
    }

    /// Records the version of an object this manager last read or wrote;
    /// `None` forgets it (the object is gone).
    fn saw(&self, key: &str, version: Option<&str>) {
        match version {
            Some(v) => self.versions.put(key, v, ()),
            None => self.versions.forget(key),
        }
    }

    /// Marks a durable write of the dispatch protocol in the log (the fault
    /// suite tells from it which write a kill followed), and stops the
    /// process if the test asked for a fault at `point` of an `op` claim.
    fn fault(&self, point: FaultPoint, op: OperationType) {
        tracing::debug!(?point, operation = ?op, "write-order point");
        if self.config.fault_point == Some(point)
            && self.config.fault_operation.is_none_or(|o| o == op)
        {
            let passed = self
                .faults_passed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if passed < self.config.fault_skip {
                return;
            }
            tracing::warn!(?point, "stopping at the requested fault point");
            std::process::exit(FAULT_EXIT_CODE);
        }
    }
}

pub use error::{Error, kube_err};

/// Runs the PtahSchema and PtahMigration controllers until their watches
/// end: one watch per kind, shared by both.
pub async fn run(ctx: Arc<Context>) {
    let ns = ctx.config.watch_namespace.as_deref();
    let flux = match stores::flux_watchable(&ctx.client, ns).await {
        Ok(()) => true,
        Err(why) => {
            tracing::info!(%why, "Flux's source objects are not watched: a spec.source.flux is read at each Resolve, a new artifact at the interval");
            false
        }
    };
    let mut shared = stores::start(&ctx.client, ns, flux);
    // A free Lease wakes the operation of this manager that has waited for
    // it longest, not whichever pass comes next; its pass goes before any
    // turn, whether it waits for one now or the wake starts it.
    // One that does not come within the grace (its claim dropped, its
    // resource deleted) gives way to the next then, not at the next's ask.
    let (express, inbox) = (ctx.express.clone(), ctx.inbox.clone());
    let later = Arc::downgrade(&ctx);
    ctx.leases.wake_with(move |lease, who| {
        express.wake(who);
        inbox.wake(who);
        let (ctx, lease) = (later.clone(), lease.to_owned());
        tokio::spawn(async move {
            let grace = crate::execution::lease::WOKEN_GRACE;
            tokio::time::sleep(grace + std::time::Duration::from_millis(100)).await;
            if let Some(ctx) = ctx.upgrade() {
                ctx.leases.still_free(&lease, std::time::Instant::now());
            }
        });
    });
    let watched = ctx.clone();
    let (leases, watch) = stores::realm_leases(
        &ctx.client,
        &ctx.config.coordination_namespace,
        move |lease, deleted| {
            watched.leases.freed(lease, deleted);
        },
    );
    ctx.leases.watch(leases);
    shared.watches.push(watch);
    let watches = futures::future::join_all(shared.watches);
    let stores = shared.stores;
    let (schema_subs, migration_subs, acks) =
        (shared.schemas, shared.migrations, shared.acknowledgments);
    let controllers = async move {
        stores.ready().await;
        tracing::info!("watches listed; starting the controllers");
        let _ = ctx.stores.set(stores.clone());
        let schemas = family(ctx.clone(), &stores, schema_subs, |c| c);
        // An acknowledgment of an unresolved run wakes the migration it names.
        let previews = preview::run(ctx.clone());
        let migrations = family(ctx, &stores, migration_subs, move |c| {
            c.watches_shared_stream(acks, |a| {
                Some(
                    ObjectRef::new(&a.spec.migration_ref.name)
                        .within(&a.namespace().unwrap_or_default()),
                )
            })
        });
        futures::join!(schemas, migrations, previews);
    };
    // The watches run for as long as the controllers do.
    futures::future::select(Box::pin(watches), Box::pin(controllers)).await;
}

/// One family's controller: its resources, the Jobs they own, their
/// approvals, and the ConfigMaps and PtahRealms they name, each event
/// waking the resources that name it; `more` adds the family's own watches.
async fn family<K: Family>(
    ctx: Arc<Context>,
    stores: &Stores,
    subs: stores::Subscribers<K, K::Approval>,
    more: impl FnOnce(Controller<K>) -> Controller<K>,
) {
    let store = K::store(stores).clone();
    let by_config_map = store.clone();
    let by_realm = store.clone();
    let store_for_flux = store.clone();
    // A result handed over by the receiver wakes the resource it is for.
    let handed = ctx
        .inbox
        .take_for(K::KIND)
        .map(|(ns, name)| ObjectRef::new(&name).within(&ns));
    // A person's decision wakes the resource it names at once.
    let controller = Controller::for_shared_stream(subs.resources, store)
        .reconcile_on(handed)
        .watches_shared_stream(subs.approvals, |a| {
            Some(ObjectRef::new(&a.owner().name).within(&a.namespace().unwrap_or_default()))
        });
    let controller = more(controller)
        .owns_shared_stream(subs.jobs)
        .watches_shared_stream(subs.config_maps, move |cm| {
            let ns = cm.namespace().unwrap_or_default();
            let name = cm.name_any();
            by_config_map
                .state()
                .into_iter()
                .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
                .filter(|r| inputs::names_config_map(r.source(), &name))
                .map(|r| ObjectRef::from_obj(&*r))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(subs.realms, move |realm| {
            let name = realm.name_any();
            by_realm
                .state()
                .into_iter()
                .filter(|r| {
                    r.job_spec()
                        .target
                        .realm_ref
                        .as_ref()
                        .map(|x| x.name.as_str())
                        == Some(name.as_str())
                })
                .map(|r| ObjectRef::from_obj(&*r))
                .collect::<Vec<_>>()
        })
        .shutdown_on_signal();
    // Flux's new artifact wakes the resources that name its object.
    let controller = match subs.flux {
        Some((git, oci)) => {
            let (by_git, by_oci) = (store_for_flux.clone(), store_for_flux);
            controller
                .watches_shared_stream(git, move |o| {
                    flux::naming(&by_git, &*o, FluxSourceKind::GitRepository)
                })
                .watches_shared_stream(oci, move |o| {
                    flux::naming(&by_oci, &*o, FluxSourceKind::OCIRepository)
                })
        }
        None => controller,
    };
    // Bounded by turns handed out in order (`turns`), not by kube-runtime's
    // limit, which can starve a resource.
    let turns = Arc::new(turns::turns(ctx.config.max_concurrent_reconciles));
    controller
        .run(
            move |obj, ctx| {
                let turns = turns.clone();
                let who = addressee(&*obj);
                async move {
                    let express = ctx.express.clone();
                    express
                        .in_turn(&turns, &who, || pass_current::<K>(obj, ctx))
                        .await
                }
            },
            error_policy,
            ctx,
        )
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(object = %obj, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "reconcile failed"),
            }
        })
        .await;
}

/// A resource as the receiver's hand-over and the realm Lease queue name it.
fn addressee<K: Family>(obj: &K) -> Addressee {
    Addressee {
        kind: K::KIND.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
    }
}

/// A pass over the object as the store holds it when its turn comes (the
/// copy it was woken with may be minutes old by then); none for an object
/// the store no longer holds.
async fn pass_current<K: Family>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    let current = K::store(ctx.stores()).get(&ObjectRef::from_obj(&*obj));
    match current {
        Some(obj) => pass::reconcile::<K>(obj, ctx).await,
        None => Ok(Action::await_change()),
    }
}

/// The next pass of an object whose pass failed: the error's class and the
/// operation under way are in the log line, and the wait grows per
/// consecutive failure of that object.
fn error_policy<F: Family>(obj: Arc<F>, error: &Error, ctx: Arc<Context>) -> Action {
    let object = pass::object_key::<F>(&obj);
    let (wait, failures) = ctx.backoff.failed(&object, error);
    let operation = obj
        .status()
        .and_then(|s| s.active_operation())
        .map(|c| c.type_);
    tracing::warn!(
        object = %object,
        class = error.class(),
        ?operation,
        failures,
        retry_in = ?wait,
        %error,
        "pass failed"
    );
    Action::requeue(wait)
}

/// The census the metrics' gauges are taken from: every resource in the
/// stores (none before the stores hold their first list).
pub fn census(ctx: &Context) -> Vec<crate::telemetry::metrics::Census> {
    fn of<F: family::Family>(
        store: &kube::runtime::reflector::Store<F>,
        now: &k8s_openapi::jiff::Timestamp,
    ) -> Vec<crate::telemetry::metrics::Census> {
        store
            .state()
            .iter()
            .map(|obj| {
                let st = obj.status().cloned().unwrap_or_default();
                let phase = F::verdict(&st).split('/').next().map(str::to_string);
                crate::telemetry::metrics::Census {
                    family: F::KIND,
                    phase: phase.filter(|p| p != "None"),
                    awaiting_approval: F::awaiting_approval(&st).is_some(),
                    due: st.active_operation().is_none()
                        && st.next_reconciliation_time().is_some_and(|t| t.0 <= *now),
                }
            })
            .collect()
    }
    let Some(stores) = ctx.stores.get() else {
        return Vec::new();
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut all = of(&stores.schemas, &now);
    all.extend(of(&stores.migrations, &now));
    all
}

/// `/metrics`: the exposition, with the census taken now.
pub fn metrics_handler(ctx: Arc<Context>) -> crate::server::Handler {
    use crate::telemetry::metrics;
    Arc::new(move |req| {
        let ctx = ctx.clone();
        Box::pin(async move {
            // OpenMetrics to a scraper that asks for it, the classic text
            // format otherwise.
            let openmetrics = req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("application/openmetrics-text"));
            let text = ctx.telemetry.metrics.render(&census(&ctx));
            let (body, content_type) = if openmetrics {
                (text, metrics::CONTENT_TYPE)
            } else {
                (metrics::classic(&text), metrics::CLASSIC_CONTENT_TYPE)
            };
            let mut r = http::Response::new(bytes::Bytes::from(body));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(content_type),
            );
            r
        })
    })
}
