//! The database-realm Lease (stage 4): a `coordination.k8s.io` Lease named
//! from the coordination digest, in one coordination namespace, that Plan,
//! Apply and the proof after an Apply hold while they run.
//!
//! * Every acquisition for another operation, or of a lapsed Lease, rotates
//!   an epoch (`v1-` + 32 random hex) kept in the Lease's
//!   [`ANNOTATION_LEASE_EPOCH`]; the claim records it before dispatch. An
//!   acquisition for the operation that holds it keeps the epoch, so two
//!   managers serving one stored claim record the same one.
//!   A claim whose epoch is no longer the Lease's has lost the lock interval:
//!   [`Leases::renew`] says [`Continuity::Lost`], the seed's
//!   `leaseContinuityLost`, set before any result is harvested.
//! * A free Lease (absent, or released: no holder) is taken at once. A foreign
//!   one is taken over only after this process observed it unchanged (same
//!   `resourceVersion`) for its full `leaseDurationSeconds` on its own
//!   monotonic clock, never by comparing the holder's wall-clock `renewTime`
//!   with ours: clocks of two machines disagree, an `Instant` does not jump.
//! * Every write carries a `resourceVersion` precondition, so two managers
//!   racing for one Lease cannot both win.
//! * This manager's operations take a Lease in the order they first waited
//!   for it (`queue.rs`): a free Lease goes to the oldest waiter, which the
//!   Lease watch wakes when it is released; one woken that does not come
//!   within [`WOKEN_GRACE`] gives way to the next ([`Leases::still_free`]).
//! * Copies stand in for a read where a stale one cannot mislead: a Lease
//!   the watch shows held elsewhere is `Busy` (read once a minute all the
//!   same); one it shows free, unless this process holds it by a later
//!   write, is taken over the watch's copy; a renewal is written over the
//!   copy of this process's last write under the epoch; and a release over
//!   the copy this process last wrote or read under the epoch (else the
//!   watch's). The precondition refuses a stale copy, and the Lease is
//!   read then. A Lease taken and released costs two writes and no read;
//!   the one read left is the seed's, before a result is harvested.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::status::PendingLockRelease;
use crate::execution::job::{LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY};
use crate::execution::paced::Paced;
use crate::execution::receiver::Addressee;
use crate::protocol::receiver::content_sha256 as sha256_hex;

mod queue;
pub use queue::{FOLLOWS_GRACE, STOPPED_ASKING, WOKEN_GRACE};

/// Prefix of every realm Lease's name.
pub const NAME_PREFIX: &str = "ptah-realm-";
/// `app.kubernetes.io/component` of a realm Lease.
pub const COMPONENT: &str = "realm-lease";
// The names live with every other label and annotation name.
pub use crate::api::annotations::{
    ANNOTATION_COORDINATION_DIGEST, ANNOTATION_LEASE_EPOCH, ANNOTATION_LEASE_OPERATION,
};

/// The bounds of `leaseDurationSeconds`, as the claim's schema has them.
const MIN_DURATION_SECONDS: i32 = 5;
const MAX_DURATION_SECONDS: i32 = 86460;
/// How soon to try again after losing a write race.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// How often a Lease the watch shows held for another operation is read
/// from the API server all the same (a watch may trail).
const WATCH_TRUSTED: Duration = Duration::from_secs(60);
/// How many released epochs [`Leases::release`] remembers: more than the
/// releases of every realm Lease within a pass's reach.
const RELEASED_KEPT: usize = 1024;
/// Writes tried before a Lease that keeps changing is reported contended.
const WRITE_ATTEMPTS: u32 = 3;

/// What a realm Lease outlives its Job's deadline by.
pub const DEADLINE_GRACE_SECONDS: i64 = 60;

/// How long a Lease taken for an operation lasts: its Job's
/// `activeDeadlineSeconds` and [`DEADLINE_GRACE_SECONDS`], or `configured`
/// when longer, within the claim's bounds. Nothing renews it while its Job
/// runs, and a manager that takes over finds it still held.
pub fn duration_for(configured: i32, active_deadline_seconds: i64) -> i32 {
    let wanted = active_deadline_seconds
        .saturating_add(DEADLINE_GRACE_SECONDS)
        .max(i64::from(configured))
        .clamp(
            i64::from(MIN_DURATION_SECONDS),
            i64::from(MAX_DURATION_SECONDS),
        );
    i32::try_from(wanted).unwrap_or(MAX_DURATION_SECONDS)
}

/// The Lease's name: [`NAME_PREFIX`] and the first 40 hex digits of the
/// digest, a valid object name. Anything but a `sha256:<hex>` digest is
/// digested first, so the name stays valid whatever the input.
pub fn lease_name(coordination_digest: &str) -> String {
    let hex = coordination_digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() >= 40 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            sha256_hex(coordination_digest.as_bytes())
                .trim_start_matches("sha256:")
                .to_owned()
        });
    format!("{NAME_PREFIX}{}", hex.get(..40).unwrap_or(&hex))
}

/// A foreign Lease as this process last saw it, and since when it has looked
/// exactly so.
#[derive(Debug)]
struct Sighting {
    resource_version: Option<String>,
    holder: String,
    renew_time: Option<MicroTime>,
    first_seen: Instant,
}

/// The realm Leases of one manager.
pub struct Leases {
    api: Api<Lease>,
    namespace: String,
    holder: String,
    /// Foreign Leases by name: a takeover needs one unchanged for its whole
    /// duration on this process's clock.
    foreign: Mutex<HashMap<String, Sighting>>,
    /// Our own Leases by name: the epoch last written and when, on this
    /// process's monotonic clock, with its duration.
    ours: Mutex<HashMap<String, Written>>,
    /// The epochs this process released lately (or found no longer held),
    /// oldest first: a pass releases again until status forgets the
    /// release, and an epoch released is never held again (each is unique),
    /// so that asks nothing. One epoch a Lease was not enough: ten schemas
    /// sharing a database release under ten epochs in turn, and each pass of
    /// a schema whose release was no longer the last read the Lease.
    released: Mutex<std::collections::VecDeque<String>>,
    /// The realm Leases as the manager's watch keeps them, once it runs.
    watched: OnceLock<Store<Lease>>,
    /// When each Lease found held through the watch was last read.
    reads: Paced,
    /// This manager's operations waiting for each Lease, oldest first.
    waiting: Mutex<queue::Queue>,
    /// How the oldest waiter is woken when its Lease is free.
    wake: OnceLock<Wake>,
}

/// How a waiter is woken to take a Lease, by name (see [`Leases::wake_with`]).
type Wake = Box<dyn Fn(&str, &Addressee) + Send + Sync>;

/// A write of one of our Leases.
#[derive(Clone, Debug)]
struct Written {
    operation_id: String,
    epoch: String,
    at: std::time::Instant,
    duration: Duration,
    /// The Lease as this process last wrote or read it under the epoch:
    /// its release is written over it without a read (a later write by
    /// anyone else fails the precondition, and the Lease is read then).
    lease: Lease,
}

/// The outcome of [`Leases::acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Held under a new epoch; the claim records it before dispatch.
    Held {
        /// The epoch (`v1-` + 32 hex).
        epoch: String,
        /// The Lease's duration, in seconds.
        duration_seconds: i32,
    },
    /// Another claim holds it, or an operation of this manager has waited
    /// for it longer; try again after `retry_after`.
    Busy {
        /// Who holds it (`holderIdentity`), who raced us to it, or the
        /// operation that waited longer.
        holder: String,
        /// How long until a takeover may be allowed, or a short retry after a
        /// lost write race.
        retry_after: Duration,
    },
}

/// The outcome of [`Leases::renew`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continuity {
    /// Still held under the claim's epoch, without interruption.
    Held,
    /// The claim's epoch no longer owns an uninterrupted lock interval.
    Lost,
}

/// A Lease operation that failed; each names the Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused or failed a request.
    #[error("Lease {namespace}/{name}: {source}")]
    Kube {
        /// The coordination namespace.
        namespace: String,
        /// The Lease.
        name: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The requested duration is outside the claim's bounds.
    #[error(
        "Lease {name}: leaseDurationSeconds {value} is outside {MIN_DURATION_SECONDS} to {MAX_DURATION_SECONDS}"
    )]
    Duration {
        /// The Lease.
        name: String,
        /// The duration asked for.
        value: i32,
    },
    /// The system's random source gave no bytes for an epoch.
    #[error("Lease {name}: the system random source gave no epoch")]
    Random {
        /// The Lease.
        name: String,
    },
    /// Every write lost a race with another writer.
    #[error("Lease {namespace}/{name}: changed under every one of {attempts} writes")]
    Contended {
        /// The coordination namespace.
        namespace: String,
        /// The Lease.
        name: String,
        /// Writes tried.
        attempts: u32,
    },
}

/// A fresh epoch: `v1-` and 32 hex digits from the system's secure random
/// source (aws-lc-rs, through rustls).
fn new_epoch(name: &str) -> Result<String, LeaseError> {
    let mut bytes = [0u8; 16];
    rustls::crypto::aws_lc_rs::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| LeaseError::Random {
            name: name.to_owned(),
        })?;
    let mut epoch = String::with_capacity(3 + 32);
    epoch.push_str("v1-");
    for b in bytes {
        epoch.push_str(&format!("{b:02x}"));
    }
    Ok(epoch)
}

fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The holder, when there is one: an empty identity is a released Lease.
fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// Held, under `epoch`.
fn held_under(lease: &Lease, epoch: &str) -> bool {
    annotation(lease, ANNOTATION_LEASE_EPOCH) == Some(epoch) && holder_of(lease).is_some()
}

/// Late by our own wall clock (or without the times to tell): another
/// manager may already have taken it over and let it go again, so the
/// interval is nobody's.
fn lapsed(spec: Option<&LeaseSpec>) -> bool {
    match spec.map(|s| (&s.renew_time, s.lease_duration_seconds)) {
        Some((Some(renewed), Some(secs))) => renewed
            .0
            .checked_add(SignedDuration::from_secs(i64::from(secs)))
            .map_or(true, |deadline| Timestamp::now() > deadline),
        _ => true,
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Leases {
    /// The Leases of the manager `holder` (its identity, written as
    /// `holderIdentity`) in the coordination namespace `namespace`.
    pub fn new(client: Client, namespace: &str, holder: &str) -> Self {
        Leases {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            holder: holder.to_owned(),
            foreign: Mutex::new(HashMap::new()),
            ours: Mutex::new(HashMap::new()),
            released: Mutex::new(std::collections::VecDeque::new()),
            watched: OnceLock::new(),
            reads: Paced::every(WATCH_TRUSTED),
            waiting: Mutex::new(queue::Queue::default()),
            wake: OnceLock::new(),
        }
    }

    /// The label selector of realm Leases, for the manager's watch.
    pub fn selector() -> String {
        format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT}")
    }

    /// Takes the watch's store of realm Leases: from now on a Lease it shows
    /// held for another operation is answered `Busy` without a read (one a
    /// minute still reads it), and a waiting claim asks the API server again
    /// only once the watch shows the Lease free.
    pub fn watch(&self, store: Store<Lease>) {
        let _ = self.watched.set(store);
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, queue::Queue> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `operation_id`, of `who`, waits for `name`: it keeps its place, or
    /// joins the end.
    fn waits(&self, name: &str, operation_id: &str, who: &Addressee, busy: Acquired) -> Acquired {
        if matches!(busy, Acquired::Busy { .. }) {
            self.queue().wait(name, operation_id, who, Instant::now());
        } else {
            self.queue().took(name, operation_id, who);
        }
        busy
    }

    /// How a waiter is woken to take its free Lease (the manager's
    /// controllers set it once). Whoever sets it calls
    /// [`Leases::still_free`] [`WOKEN_GRACE`] after each wake.
    pub fn wake_with(&self, wake: impl Fn(&str, &Addressee) + Send + Sync + 'static) {
        let _ = self.wake.set(Box::new(wake));
    }

    fn wake(&self, lease: &str, who: Option<Addressee>) -> Option<Addressee> {
        let who = who?;
        tracing::debug!(lease, resource = %who.name, "a realm Lease is free: waking its oldest waiter");
        if let Some(wake) = self.wake.get() {
            wake(lease, &who);
        }
        Some(who)
    }

    /// The Lease `name` as the watch shows it, once the watch runs.
    fn as_watched(&self, name: &str) -> Option<Lease> {
        let lease = self
            .watched
            .get()?
            .get(&ObjectRef::new(name).within(&self.namespace))?;
        Some(Lease::clone(&lease))
    }

    /// `WOKEN_GRACE` after a wake, at `now`: when the watch still shows
    /// `name` free (or gone), the waiter woken did not come, and the next
    /// one is woken now rather than at its own next ask; whom.
    pub fn still_free(&self, name: &str, now: Instant) -> Option<Addressee> {
        if self
            .as_watched(name)
            .is_some_and(|lease| holder_of(&lease).is_some())
        {
            return None;
        }
        let who = self.queue().next(name, now);
        self.wake(name, who)
    }

    /// The watch shows `lease` free (released, or `deleted`): the operation
    /// of this manager that has waited longest is woken to take it; who
    /// that is.
    pub fn freed(&self, lease: &Lease, deleted: bool) -> Option<Addressee> {
        if !deleted && holder_of(lease).is_some() {
            return None;
        }
        let name = lease.metadata.name.as_deref()?;
        let who = self.queue().next(name, Instant::now());
        self.wake(name, who)
    }

    /// How many of this manager's operations wait for a realm Lease.
    pub fn waiting(&self) -> usize {
        self.queue().len()
    }

    /// `Busy`, when the watch shows `name` held for another operation, not
    /// yet takeable, and the Lease is not due a read.
    fn busy_as_watched(
        &self,
        name: &str,
        operation_id: &str,
        duration_seconds: i32,
    ) -> Option<Acquired> {
        let lease = self
            .watched
            .get()?
            .get(&ObjectRef::new(name).within(&self.namespace))?;
        let busy = self.busy(name, &lease, operation_id, duration_seconds)?;
        (!self.reads.due(name)).then_some(busy)
    }

    /// `Busy` when `lease` is held for another operation and this process
    /// has not yet seen it unchanged for its full duration; `None` when it
    /// is free, ours, or may be taken over.
    fn busy(
        &self,
        name: &str,
        lease: &Lease,
        operation_id: &str,
        duration_seconds: i32,
    ) -> Option<Acquired> {
        let holder = holder_of(lease)?;
        if annotation(lease, ANNOTATION_LEASE_OPERATION) == Some(operation_id) {
            return None;
        }
        // The duration the holder wrote is the one it promised to renew
        // within.
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .filter(|d| *d > 0)
            .unwrap_or(duration_seconds);
        let full = Duration::from_secs(u64::from(duration.unsigned_abs()));
        let seen = self.unchanged_for(name, lease, holder);
        (seen < full).then(|| Acquired::Busy {
            holder: holder.to_owned(),
            retry_after: full - seen,
        })
    }

    fn released(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<String>> {
        self.released.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ours(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        self.ours.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers our write of `name` for the operation under `epoch`, now:
    /// `lease`, as the API server answered it.
    fn wrote(
        &self,
        name: &str,
        operation_id: &str,
        epoch: &str,
        duration_seconds: i32,
        lease: Lease,
    ) {
        let written = Written {
            operation_id: operation_id.to_owned(),
            epoch: epoch.to_owned(),
            at: Instant::now(),
            duration: Duration::from_secs(u64::from(duration_seconds.unsigned_abs())),
            lease,
        };
        self.ours().insert(name.to_owned(), written);
    }

    /// Our Lease `name`, read as `lease` and still under our epoch: the
    /// newest copy of it (not a write, so not a fresher hold).
    fn read_ours(&self, name: &str, lease: &Lease) {
        if let Some(w) = self.ours().get_mut(name)
            && annotation(lease, ANNOTATION_LEASE_EPOCH) == Some(w.epoch.as_str())
        {
            w.lease = lease.clone();
        }
    }

    /// Forgets our last write of `name`: it is released, or no longer ours;
    /// what it was.
    fn forget_ours(&self, name: &str) -> Option<Written> {
        self.ours().remove(name)
    }

    /// Whether this process holds `name` by its own last write: a copy
    /// the watch shows free is older than that write.
    fn holds(&self, name: &str) -> bool {
        self.ours().contains_key(name)
    }

    /// Whether this process wrote `name` under `epoch` within a third of
    /// its duration: no manager that follows the protocol can have taken it
    /// over since (a takeover waits the whole duration), so it is still held
    /// without asking the API server.
    fn fresh(&self, name: &str, operation_id: &str, epoch: &str) -> bool {
        self.ours().get(name).is_some_and(|w| {
            w.operation_id == operation_id && w.epoch == epoch && w.at.elapsed() < w.duration / 3
        })
    }

    /// [`Leases::renew`], unless this process wrote the Lease under `epoch`
    /// for the operation within a third of its duration: then `Held` without
    /// a request (a pass while the claim's Job runs; the pass that harvests
    /// reads it: [`Leases::verify`]).
    pub async fn renew_if_due(
        &self,
        coordination_digest: &str,
        operation_id: &str,
        epoch: &str,
    ) -> Result<Continuity, LeaseError> {
        if self.fresh(&lease_name(coordination_digest), operation_id, epoch) {
            return Ok(Continuity::Held);
        }
        self.renew(coordination_digest, operation_id, epoch).await
    }

    fn kube_error(&self, name: &str) -> impl FnOnce(kube::Error) -> LeaseError {
        let (namespace, name) = (self.namespace.clone(), name.to_owned());
        move |source| LeaseError::Kube {
            namespace,
            name,
            source,
        }
    }

    /// The Lease as the API server has it now; `None` when absent. `why`
    /// names the caller in the debug log (the benchmark counts reads by it).
    async fn read(&self, name: &str, why: &'static str) -> Result<Option<Lease>, LeaseError> {
        tracing::debug!(lease = name, why, "reading a realm Lease");
        self.api.get_opt(name).await.map_err(self.kube_error(name))
    }

    fn contended(&self, name: &str) -> LeaseError {
        LeaseError::Contended {
            namespace: self.namespace.clone(),
            name: name.to_owned(),
            attempts: WRITE_ATTEMPTS,
        }
    }

    fn sightings(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sighting>> {
        // A panic elsewhere while holding the table leaves it usable.
        self.foreign
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long this process has seen `lease` exactly as it is now; a change
    /// (or a first sighting) starts the count again.
    fn unchanged_for(&self, name: &str, lease: &Lease, holder: &str) -> Duration {
        let resource_version = lease.metadata.resource_version.clone();
        let renew_time = lease.spec.as_ref().and_then(|s| s.renew_time.clone());
        let mut table = self.sightings();
        match table.get(name) {
            Some(s)
                if s.resource_version == resource_version
                    && s.holder == holder
                    && s.renew_time == renew_time =>
            {
                s.first_seen.elapsed()
            }
            _ => {
                table.insert(
                    name.to_owned(),
                    Sighting {
                        resource_version,
                        holder: holder.to_owned(),
                        renew_time,
                        first_seen: Instant::now(),
                    },
                );
                Duration::ZERO
            }
        }
    }

    fn forget(&self, name: &str) {
        self.sightings().remove(name);
    }

    /// The Lease as this acquisition writes it over `base` (the object read,
    /// with its `resourceVersion` as the precondition, or a new one).
    fn acquisition(
        &self,
        base: Option<Lease>,
        name: &str,
        coordination_digest: &str,
        operation_id: &str,
        epoch: &str,
        duration_seconds: i32,
    ) -> Lease {
        let now = MicroTime(Timestamp::now());
        let mut lease = base.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
                    (LABEL_COMPONENT.to_owned(), COMPONENT.to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(ANNOTATION_LEASE_EPOCH.to_owned(), epoch.to_owned());
        annotations.insert(
            ANNOTATION_LEASE_OPERATION.to_owned(),
            operation_id.to_owned(),
        );
        annotations.insert(
            ANNOTATION_COORDINATION_DIGEST.to_owned(),
            coordination_digest.to_owned(),
        );
        let created = lease.metadata.resource_version.is_none();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.holder.clone());
        spec.lease_duration_seconds = Some(duration_seconds);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        // One transition per acquisition: each is a new epoch.
        spec.lease_transitions = Some(if created {
            0
        } else {
            spec.lease_transitions.unwrap_or(0).saturating_add(1)
        });
        lease
    }

    /// Takes the Lease for the claim under an epoch (`v1-` + 32 random hex,
    /// in [`ANNOTATION_LEASE_EPOCH`], beside the operation id in
    /// [`ANNOTATION_LEASE_OPERATION`]).
    ///
    /// A free Lease (absent, or released: no holder) is taken at once; one
    /// held for this same operation id, by any manager, is renewed and keeps
    /// its epoch (the claim is stored before its Lease is taken, so the epoch
    /// can only be this claim's), unless it lapsed: then it is taken anew
    /// under a new epoch. One held for another operation is taken over only
    /// after this process observed it unchanged for its full
    /// `leaseDurationSeconds` on its monotonic clock, otherwise `Busy` with
    /// the time left. A lost write race is `Busy` with a short retry.
    ///
    /// A Lease this would take anew is left to the operation of this manager
    /// that waited for it longer, if any still asks: `Busy`, and `who` (the
    /// resource of `operation_id`) waits its turn.
    pub async fn acquire(
        &self,
        coordination_digest: &str,
        operation_id: &str,
        duration_seconds: i32,
        who: &Addressee,
    ) -> Result<Acquired, LeaseError> {
        let name = lease_name(coordination_digest);
        let acquired = self
            .try_acquire(coordination_digest, operation_id, duration_seconds, who)
            .await?;
        Ok(self.waits(&name, operation_id, who, acquired))
    }

    async fn try_acquire(
        &self,
        coordination_digest: &str,
        operation_id: &str,
        duration_seconds: i32,
        who: &Addressee,
    ) -> Result<Acquired, LeaseError> {
        let name = lease_name(coordination_digest);
        if !(MIN_DURATION_SECONDS..=MAX_DURATION_SECONDS).contains(&duration_seconds) {
            return Err(LeaseError::Duration {
                name,
                value: duration_seconds,
            });
        }
        if let Some(busy) = self.busy_as_watched(&name, operation_id, duration_seconds) {
            return Ok(busy);
        }
        // A Lease the watch shows free is written over the watch's copy,
        // without a read (or goes to an older waiter, below): the write's
        // resourceVersion precondition refuses a copy gone stale.
        let watched = self.as_watched(&name);
        let why = match &watched {
            None => "acquire: not watched",
            Some(_) if self.holds(&name) => "acquire: held by this manager",
            Some(lease) if holder_of(lease).is_some() => "acquire: held as watched",
            Some(_) => "acquire: free",
        };
        let free = watched.filter(|lease| holder_of(lease).is_none() && !self.holds(&name));
        let current = match free {
            Some(lease) => Some(lease),
            None => self.read(&name, why).await?,
        };

        let raced = |holder: Option<&str>| Acquired::Busy {
            holder: holder.unwrap_or("a concurrent writer").to_owned(),
            retry_after: CONFLICT_RETRY,
        };
        let holder = current.as_ref().and_then(holder_of).map(str::to_owned);
        if let (Some(lease), Some(holder)) = (&current, &holder) {
            // Held for this very operation, by whichever manager, and not
            // lapsed: the epoch is this claim's and is kept. Another manager
            // serving the same stored claim (a replica, or one racing it)
            // records the same epoch, and nothing dispatched under it loses
            // its interval.
            let same_operation =
                annotation(lease, ANNOTATION_LEASE_OPERATION) == Some(operation_id);
            if same_operation
                && !lapsed(lease.spec.as_ref())
                && let Some(epoch) = annotation(lease, ANNOTATION_LEASE_EPOCH)
            {
                let epoch = epoch.to_owned();
                let duration = lease.spec.as_ref().and_then(|s| s.lease_duration_seconds);
                return Ok(
                    match self
                        .renew_once(
                            coordination_digest,
                            operation_id,
                            &epoch,
                            true,
                            (Some(lease.clone()), "acquire: renew"),
                        )
                        .await?
                    {
                        Continuity::Held => Acquired::Held {
                            epoch,
                            duration_seconds: duration.unwrap_or(duration_seconds),
                        },
                        // Taken or released between the read and the renewal.
                        Continuity::Lost => raced(Some(holder)),
                    },
                );
            }
            if let Some(busy) = self.busy(&name, lease, operation_id, duration_seconds) {
                return Ok(busy);
            }
        }
        if let Some(busy) = self.older_waiter(&name, operation_id, who) {
            return Ok(busy);
        }

        let epoch = new_epoch(&name)?;
        let exists = current.is_some();
        let lease = self.acquisition(
            current,
            &name,
            coordination_digest,
            operation_id,
            &epoch,
            duration_seconds,
        );
        let written = if exists {
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await
        } else {
            self.api.create(&PostParams::default(), &lease).await
        };
        match written {
            Ok(written) => {
                self.forget(&name);
                self.wrote(&name, operation_id, &epoch, duration_seconds, written);
                Ok(Acquired::Held {
                    epoch,
                    duration_seconds,
                })
            }
            Err(e) if is_conflict(&e) => Ok(raced(holder.as_deref())),
            Err(e) => Err(self.kube_error(&name)(e)),
        }
    }

    /// `Busy` when an operation of this manager has waited for the free
    /// Lease `name` longer than `operation_id` of `who` (or it is kept for
    /// an Apply that follows its Plan); that one is woken, if it was not yet
    /// (found free before the watch said so).
    fn older_waiter(&self, name: &str, operation_id: &str, who: &Addressee) -> Option<Acquired> {
        let (first, wake) = self
            .queue()
            .ahead(name, operation_id, who, Instant::now())?;
        self.wake(name, wake);
        Some(Acquired::Busy {
            holder: first.to_string(),
            // Unless woken first, it asks again at the lifecycle's retry, as
            // for a Lease held.
            retry_after: crate::api::realm::LEASE_RETRY,
        })
    }

    /// Renews the Lease held for the claim if it still carries `epoch` and
    /// the operation: `Held`. Anything else (another epoch or operation,
    /// released, absent, or a renewal that comes after `renewTime` +
    /// duration on the wall clock) is `Lost`: the seed's
    /// `leaseContinuityLost`, to be set before any result is harvested.
    pub async fn renew(
        &self,
        coordination_digest: &str,
        operation_id: &str,
        epoch: &str,
    ) -> Result<Continuity, LeaseError> {
        // Written over the copy of our last write under the epoch, without a
        // read: its precondition refuses it if anything wrote since, and the
        // Lease is read then.
        let name = lease_name(coordination_digest);
        let mine = self
            .ours()
            .get(&name)
            .filter(|w| w.operation_id == operation_id && w.epoch == epoch)
            .map(|w| w.lease.clone());
        let continuity = self
            .renew_once(
                coordination_digest,
                operation_id,
                epoch,
                true,
                (mine, "renew"),
            )
            .await?;
        if continuity == Continuity::Lost {
            self.forget_ours(&name);
        }
        Ok(continuity)
    }

    /// Before a result is harvested: the Lease, read now, must still carry
    /// `epoch` and the operation, and must not have lapsed
    /// (`Lost` otherwise, as [`Leases::renew`]). It is renewed as well
    /// unless this process wrote it within a third of its duration: an
    /// operation that ends soon after its acquisition writes nothing more.
    pub async fn verify(
        &self,
        coordination_digest: &str,
        operation_id: &str,
        epoch: &str,
    ) -> Result<Continuity, LeaseError> {
        let fresh = self.fresh(&lease_name(coordination_digest), operation_id, epoch);
        let continuity = self
            .renew_once(
                coordination_digest,
                operation_id,
                epoch,
                !fresh,
                (None, "verify"),
            )
            .await?;
        if continuity == Continuity::Lost {
            self.forget_ours(&lease_name(coordination_digest));
        }
        Ok(continuity)
    }

    /// Judges (and with `write` renews) the Lease over `copy`, or over a
    /// read named `why` when there is none or the copy's write is refused.
    async fn renew_once(
        &self,
        coordination_digest: &str,
        operation_id: &str,
        epoch: &str,
        write: bool,
        (mut copy, why): (Option<Lease>, &'static str),
    ) -> Result<Continuity, LeaseError> {
        let name = lease_name(coordination_digest);
        for _ in 0..WRITE_ATTEMPTS {
            let current = match copy.take() {
                Some(lease) => Some(lease),
                None => self.read(&name, why).await?,
            };
            let Some(mut lease) = current else {
                return Ok(Continuity::Lost);
            };
            // The epoch is unique to one acquisition, whoever holds it now
            // (another manager serving the same claim keeps it).
            let carries = holder_of(&lease).is_some()
                && annotation(&lease, ANNOTATION_LEASE_OPERATION) == Some(operation_id)
                && annotation(&lease, ANNOTATION_LEASE_EPOCH) == Some(epoch);
            if !carries {
                return Ok(Continuity::Lost);
            }
            if lapsed(lease.spec.as_ref()) {
                return Ok(Continuity::Lost);
            }
            if !write {
                self.read_ours(&name, &lease);
                return Ok(Continuity::Held);
            }
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            let duration = spec.lease_duration_seconds.unwrap_or(0);
            match self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(renewed) => {
                    self.wrote(&name, operation_id, epoch, duration, renewed);
                    return Ok(Continuity::Held);
                }
                // Written in between: read again and judge what is there now.
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(self.kube_error(&name)(e)),
            }
        }
        Err(self.contended(&name))
    }

    /// Releases the Lease only if it still carries `release.lease_epoch`:
    /// clears the holder and keeps the object (its next acquisition is
    /// immediate). Otherwise, or when it is gone, does nothing. Idempotent.
    ///
    /// `followed_by`, the resource whose Apply follows the releasing Plan
    /// at once, keeps the Plan's place: the Lease is kept for it ahead of
    /// every waiter, from before the write, and it is woken.
    pub async fn release(
        &self,
        release: &PendingLockRelease,
        followed_by: Option<&Addressee>,
    ) -> Result<(), LeaseError> {
        let name = lease_name(&release.coordination_digest);
        if self.released().contains(&release.lease_epoch) {
            return Ok(());
        }
        let mine = self.forget_ours(&name).map(|w| w.lease);
        let released = self
            .write_release(&name, release, mine, followed_by)
            .await?;
        // Released now, or no longer under the epoch: done either way.
        let mut done = self.released();
        if done.len() >= RELEASED_KEPT {
            done.pop_front();
        }
        done.push_back(release.lease_epoch.clone());
        drop(done);
        // A place kept by a write that then failed, or by the release a
        // pass before (a pass releases again until status forgets it),
        // stands: the Apply's own ask takes it, or it lapses.
        if released && let Some(who) = followed_by {
            self.wake(&name, Some(who.clone()));
        }
        Ok(())
    }

    /// The release's writes: whether this call released the Lease.
    async fn write_release(
        &self,
        name: &str,
        release: &PendingLockRelease,
        mine: Option<Lease>,
        followed_by: Option<&Addressee>,
    ) -> Result<bool, LeaseError> {
        let epoch = release.lease_epoch.as_str();
        // Written without a read over the copy this process last wrote or
        // read under the epoch, or else the watch's; one gone stale fails
        // its precondition and the Lease is read. A copy without the epoch
        // may only trail the acquisition, so it is read too, never taken as
        // released.
        let mut copy = mine
            .or_else(|| self.as_watched(name))
            .filter(|lease| held_under(lease, epoch));
        for _ in 0..WRITE_ATTEMPTS {
            let current = match copy.take() {
                Some(lease) => Some(lease),
                None => self.read(name, "release").await?,
            };
            // The epoch is unique to one acquisition: anything else belongs
            // to a later claim.
            let Some(mut lease) = current.filter(|lease| held_under(lease, epoch)) else {
                return Ok(false);
            };
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
            }
            // Before the write: a waiter woken by it finds the place kept.
            if let Some(who) = followed_by {
                let now = Instant::now();
                self.queue().follows(name, &release.operation_id, who, now);
            }
            match self.api.replace(name, &PostParams::default(), &lease).await {
                Ok(_) => return Ok(true),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(self.kube_error(name)(e)),
            }
        }
        Err(self.contended(name))
    }
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("namespace", &self.namespace)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn lease_name_takes_forty_hex_of_the_digest() {
        let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
        assert_eq!(
            lease_name(&digest),
            "ptah-realm-0123456789abcdef0123456789abcdef01234567"
        );
    }

    #[test]
    fn lease_name_of_anything_else_is_still_a_valid_name() {
        for odd in ["", "sha256:XYZ", "Not A Digest/..", "sha256:abc"] {
            let name = lease_name(odd);
            assert!(name.starts_with(NAME_PREFIX), "{name}");
            assert_eq!(name.len(), NAME_PREFIX.len() + 40, "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name}"
            );
        }
        assert_ne!(lease_name("a"), lease_name("b"));
    }

    #[test]
    fn a_lease_outlives_its_jobs_deadline_by_a_minute_within_the_bounds() {
        assert_eq!(duration_for(15, 900), 960);
        assert_eq!(duration_for(3600, 900), 3600);
        assert_eq!(duration_for(15, 0), 60);
        assert_eq!(duration_for(1, -100), MIN_DURATION_SECONDS);
        assert_eq!(duration_for(15, 10 * 86400), MAX_DURATION_SECONDS);
        assert_eq!(duration_for(15, i64::MAX), MAX_DURATION_SECONDS);
    }

    #[test]
    fn epochs_match_the_pattern_and_differ() {
        let a = new_epoch("x").expect("epoch");
        let b = new_epoch("x").expect("epoch");
        assert_ne!(a, b);
        for e in [a, b] {
            let hex = e.strip_prefix("v1-").expect("prefix");
            assert_eq!(hex.len(), 32, "{e}");
            assert!(
                hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{e}"
            );
        }
    }

    /// Leases whose API server refuses every connection: a request made
    /// fails, so an answer without an error was given without one.
    fn unreachable(store: Store<Lease>) -> Leases {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let leases = Leases::new(client, "ptah-system", "manager-a");
        leases.watch(store);
        leases
    }

    fn who() -> Addressee {
        Addressee {
            kind: "PtahSchema".into(),
            namespace: "shop".into(),
            name: "orders".into(),
        }
    }

    fn held_for(name: &str, operation_id: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ptah-system".to_owned()),
                resource_version: Some("7".to_owned()),
                annotations: Some(BTreeMap::from([
                    (
                        ANNOTATION_LEASE_OPERATION.to_owned(),
                        operation_id.to_owned(),
                    ),
                    (
                        ANNOTATION_LEASE_EPOCH.to_owned(),
                        format!("v1-{}", "a".repeat(32)),
                    ),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("manager-b".to_owned()),
                lease_duration_seconds: Some(600),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..LeaseSpec::default()
            }),
        }
    }

    #[tokio::test]
    async fn a_lease_the_watch_shows_held_elsewhere_is_read_once_a_minute_not_on_every_ask() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let name = lease_name(&digest);
        let (store, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(held_for(
            &name, "op-b",
        )));
        let leases = unreachable(store);
        // The first ask reads it (and fails here: nothing answers).
        assert!(leases.acquire(&digest, "op-a", 600, &who()).await.is_err());
        // Within the minute the watch answers, with the time left.
        for _ in 0..3 {
            match leases.acquire(&digest, "op-a", 600, &who()).await {
                Ok(Acquired::Busy {
                    holder,
                    retry_after,
                }) => {
                    assert_eq!(holder, "manager-b");
                    assert!(retry_after > Duration::from_secs(590), "{retry_after:?}");
                }
                other => panic!("expected Busy from the watch, got {other:?}"),
            }
        }
    }

    fn addressee(name: &str) -> Addressee {
        Addressee {
            name: name.into(),
            ..who()
        }
    }

    fn released(name: &str) -> Lease {
        let mut lease = held_for(name, "op-b");
        lease.spec.as_mut().expect("a spec").holder_identity = None;
        lease
    }

    /// Leases over `seen` as the watch shows it, and who they wake.
    fn watching(seen: Lease) -> (Leases, Arc<Mutex<Vec<String>>>) {
        let (store, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(seen));
        let leases = unreachable(store);
        let woken = Arc::new(Mutex::new(Vec::new()));
        let log = woken.clone();
        leases.wake_with(move |_, who| log.lock().unwrap().push(who.name.clone()));
        (leases, woken)
    }

    #[tokio::test]
    async fn a_lease_the_watch_shows_free_goes_to_an_older_waiter_without_a_read() {
        let digest = format!("sha256:{}", "ef".repeat(32));
        let name = lease_name(&digest);
        let (leases, woken) = watching(released(&name));
        let t = Instant::now();
        leases.queue().wait(&name, "op-b", &addressee("b"), t);
        // Nothing answers at this API server: Busy came from the watch.
        match leases.acquire(&digest, "op-a", 600, &who()).await {
            Ok(Acquired::Busy { holder, .. }) => {
                assert_eq!(holder, "operation op-b, which has waited longer");
            }
            other => panic!("expected Busy without a read, got {other:?}"),
        }
        assert_eq!(*woken.lock().unwrap(), ["b"]);
        assert_eq!(leases.waiting(), 2, "op-a waits behind op-b");
    }

    #[tokio::test]
    async fn a_woken_waiter_that_does_not_come_gives_way_to_the_next_after_the_grace() {
        let digest = format!("sha256:{}", "12".repeat(32));
        let name = lease_name(&digest);
        let free = released(&name);
        let (leases, woken) = watching(free.clone());
        let t = Instant::now();
        leases.queue().wait(&name, "op-b", &addressee("b"), t);
        leases.queue().wait(&name, "op-c", &addressee("c"), t);
        assert_eq!(leases.freed(&free, false), Some(addressee("b")));
        // Within the grace two may still come; after it, three is woken.
        assert_eq!(leases.still_free(&name, Instant::now()), None);
        let after = Instant::now() + WOKEN_GRACE;
        assert_eq!(leases.still_free(&name, after), Some(addressee("c")));
        assert_eq!(*woken.lock().unwrap(), ["b", "c"]);

        // A Lease the watch shows taken again wakes nobody.
        let (leases, woken) = watching(held_for(&name, "op-x"));
        leases.queue().wait(&name, "op-b", &addressee("b"), t);
        assert_eq!(leases.still_free(&name, after), None);
        assert!(woken.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_lease_the_watch_shows_free_or_ours_goes_to_the_api_server() {
        let digest = format!("sha256:{}", "cd".repeat(32));
        let name = lease_name(&digest);
        // Free (written over the watch's copy) or held for this very
        // operation (read): either way a request, which fails here.
        let mut released = held_for(&name, "op-b");
        released.spec.as_mut().expect("a spec").holder_identity = Some(String::new());
        for seen in [released, held_for(&name, "op-a")] {
            let (store, mut writer) = kube::runtime::reflector::store();
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(seen));
            let leases = unreachable(store);
            for _ in 0..2 {
                assert!(leases.acquire(&digest, "op-a", 600, &who()).await.is_err());
            }
        }
        // Nor is a Lease the watch has not shown answered from it.
        let (store, _writer) = kube::runtime::reflector::store();
        let leases = unreachable(store);
        for _ in 0..2 {
            assert!(leases.acquire(&digest, "op-a", 600, &who()).await.is_err());
        }
    }
}
