//! The I/O both families' passes share: the claim's Job (adopt, create once,
//! harvest, sweep), the realm census and Leases, snapshots and policy
//! inputs, Events, status writes and the finalizer. Each family's pass
//! ([`super::schema`], [`super::migration`]) turns these answers into its own
//! machine's observations.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::harvest::Bindings;
use super::{Context, Error, FaultPoint, inputs, kube_err};
use crate::api::condition::Reason;
use crate::api::realm::PtahRealm;
use crate::api::source::{ConfigMapSource, Source, SourceKind, SourceStatus};
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{ClaimInput, build_job, is_job_of_claim};
use crate::execution::receiver::{self, Addressee, StoredResult, receiver_ca_config_map};
use crate::execution::snapshot::{self, ResolveError};
use crate::lifecycle::realm::{self, Claimant, RealmVerdict};

/// A pass with nothing scheduled still looks again this often.
const IDLE_RECHECK: Duration = Duration::from_secs(300);
/// A claim with a Job under way is looked at this often besides its watch.
const JOB_RECHECK: Duration = Duration::from_secs(30);

/// The manager's clock.
pub fn now() -> Time {
    Time(Timestamp::now())
}

/// When the next pass is due: the earliest of what the pass asked for.
#[derive(Default)]
pub struct Requeue(Option<Timestamp>);

impl Requeue {
    /// No later than `at`.
    pub fn at(&mut self, at: Timestamp) {
        self.0 = Some(self.0.map_or(at, |r| r.min(at)));
    }

    /// No later than `d` from now.
    pub fn within(&mut self, d: Duration) {
        let d = k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or_default();
        self.at(Timestamp::now()
            .checked_add(d)
            .unwrap_or_else(|_| Timestamp::now()));
    }

    /// The action, given the claim the pass left: a dispatched claim is
    /// looked at often enough to renew its Lease well within its duration.
    pub fn action(mut self, claim: Option<&ActiveOperation>) -> Action {
        if let Some(c) = claim.filter(|c| c.dispatch_started) {
            let lease = c
                .lease_duration_seconds
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(15) / 3 + 1));
            self.within(lease.unwrap_or(JOB_RECHECK).min(JOB_RECHECK));
        }
        self.within(IDLE_RECHECK);
        let at = self.0.unwrap_or_else(Timestamp::now);
        let wait = Timestamp::now()
            .duration_until(at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        Action::requeue(wait.max(Duration::from_millis(200)))
    }
}

/// Writes `obj`'s status through the subresource, guarded by the
/// resourceVersion `obj` carries: a concurrent write fails the pass, which
/// starts again from what is stored.
pub async fn write_status<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.name_any();
    api.replace_status(&name, &PostParams::default(), obj)
        .await
        .map_err(kube_err(format!("writing the status of {name}")))
}

/// The realm census over the stores: every claimant the manager watches
/// and the PtahRealms. Pure.
pub fn census(stores: &super::Stores, me: Option<Claimant>) -> RealmVerdict {
    let Some(me) = me else {
        return RealmVerdict::Ok;
    };
    // Only the resources that may share `me`'s database are hashed: the
    // census runs on every pass, over every resource.
    let schemas = stores
        .schemas
        .state_filter(|s| realm::may_share(&me, s.metadata.namespace.as_deref(), &s.spec.target));
    let migrations = stores
        .migrations
        .state_filter(|m| realm::may_share(&me, m.metadata.namespace.as_deref(), &m.spec.target));
    let all: Vec<Claimant> = schemas
        .iter()
        .filter_map(|s| realm::claimant_of_schema(s))
        .chain(
            migrations
                .iter()
                .filter_map(|m| realm::claimant_of_migration(m)),
        )
        .collect();
    let realms: Vec<PtahRealm> = stores
        .realms
        .state()
        .iter()
        .map(|r| (**r).clone())
        .collect();
    realm::verdict(&me, &all, &realms)
}

/// What changed in what the source names since it was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputChange {
    /// The source ConfigMap's selected content, or the source policy.
    Source,
    /// The verification policy.
    VerificationPolicy,
}

/// An edit of what the source or its policies name, read at once. A
/// Resolve or Verify under way reads the policies as they are now: its
/// result decides, and status keeps the old binding until then.
pub async fn input_changes(
    ctx: &Context,
    ns: &str,
    src: &Source,
    recorded: &SourceStatus,
    claim: Option<&ActiveOperation>,
) -> Vec<InputChange> {
    let client = &ctx.client;
    let mut out = Vec::new();
    let reading_source =
        claim.is_some_and(|c| matches!(c.type_, OperationType::Resolve | OperationType::Verify));
    let source_policy = match &src.source_policy_from {
        Some(p) => inputs::policy(client, ns, p).await.ok().map(|(b, _)| b),
        None => None,
    };
    let policy_moved = src.kind() != Some(SourceKind::OCI)
        && !inputs::same_policy(recorded.source_policy.as_ref(), source_policy.as_ref());
    let content_moved = match (&src.config_map, recorded.config_map.as_ref()) {
        (Some(cm), Some(resolved)) => match current_content(ctx, ns, cm).await {
            Some((uid, digest)) => uid != resolved.uid || digest != recorded.content_digest,
            // Gone or unreadable: the next read says so, naming it.
            None => false,
        },
        _ => false,
    };
    // Flux has another artifact than the one resolved (a new revision, or
    // another object of the name): read it now, not at the interval.
    let flux_moved = match (
        &src.flux,
        recorded.flux.as_ref(),
        ctx.stores().flux.as_ref(),
    ) {
        (Some(f), Some(resolved), Some(stores)) if !reading_source => stores
            .artifact(ns, f)
            .is_some_and(|(uid, revision)| uid != resolved.uid || revision != recorded.revision),
        _ => false,
    };
    if (policy_moved && !reading_source) || content_moved || flux_moved {
        out.push(InputChange::Source);
    }
    if let (Some(p), Some(evidence), false) = (
        &src.verification_policy_from,
        &recorded.verification,
        reading_source,
    ) {
        let current = inputs::policy(client, ns, p).await.ok().map(|(b, _)| b);
        if !inputs::same_policy(Some(&evidence.policy), current.as_ref()) {
            out.push(InputChange::VerificationPolicy);
        }
    }
    out
}

/// The UID and selected content digest of a source ConfigMap as it is now:
/// read again only when the metadata watch shows another resourceVersion
/// than the one last read (so an idle pass reads no ConfigMap).
async fn current_content(
    ctx: &Context,
    ns: &str,
    cm: &ConfigMapSource,
) -> Option<(String, String)> {
    let key = format!("{ns}/{}/{}", cm.name, cm.keys.join(","));
    let version = ctx
        .stores()
        .config_maps
        .get(&kube::runtime::reflector::ObjectRef::new(&cm.name).within(ns))
        .and_then(|m| m.metadata.resource_version.clone());
    if let Some(v) = &version
        && let Some(known) = ctx.contents.at(&key, v)
    {
        return Some(known);
    }
    let read = snapshot::current_content(&ctx.client, ns, cm).await.ok()?;
    if let Some(v) = version {
        ctx.contents.put(&key, &v, read.clone());
    }
    Some(read)
}

/// The policies a result's bindings name, as they are now.
pub async fn bindings(ctx: &Context, ns: &str, src: &Source) -> Bindings {
    let read = |r: Option<&crate::api::common::ConfigMapKeyRef>| {
        let r = r.cloned();
        let client = ctx.client.clone();
        let ns = ns.to_string();
        async move {
            match r {
                Some(r) => inputs::policy(&client, &ns, &r).await.ok().map(|(b, _)| b),
                None => None,
            }
        }
    };
    Bindings {
        source_policy: read(src.source_policy_from.as_ref()).await,
        verification_policy: read(src.verification_policy_from.as_ref()).await,
    }
}

/// The part of the claim the Job carries.
pub fn claim_input(c: &ActiveOperation) -> ClaimInput {
    ClaimInput {
        operation_id: c.operation_id.clone(),
        input_fingerprint: c.input_fingerprint.clone(),
        attempt: c.attempt,
        dispatch_not_after: c.dispatch_not_after.clone(),
        execution_not_after: c.execution_not_after.clone(),
    }
}

/// Where a dispatched claim's Job is.
#[derive(Debug)]
pub enum ClaimJob {
    /// The claim reserves no name.
    Unnamed,
    /// Another object holds the reserved name: not ours to read.
    Foreign,
    /// Ours and running; its UID.
    Running(Option<String>),
    /// Ours and ended.
    Ended(Box<Job>),
    /// No Job; whether a result was stored for the attempt.
    Missing {
        /// The receiver holds the attempt's result.
        stored: bool,
    },
}

/// Finds the claim's Job under its reserved name; a Job whose result was
/// handed over counts as ended (its runner only waits for the answer).
pub async fn claim_job(
    ctx: &Context,
    to: &Addressee,
    owner_uid: &str,
    c: &ActiveOperation,
) -> Result<ClaimJob, Error> {
    let ns = to.namespace.as_str();
    let Some(job_name) = c.job_name.as_deref() else {
        return Ok(ClaimJob::Unnamed);
    };
    // The Job store first: a Job ours in it is running or has ended (an end
    // is never undone). One not there yet is read from the API server,
    // unless it is a read's Job this manager created (or read) within the
    // minute: the watch trails the create, and the runner's hand-over wakes
    // the pass, which then reads it. An Apply's result is stored, not handed
    // over, so only its Job tells its end: it is always read. A Job the
    // store has shown running for over a minute is read too, at intervals
    // that grow with its age (a store that trails must not hold a claim and
    // its database's realm Lease for long).
    let key = job_key(ns, job_name);
    let in_store = ctx
        .stores()
        .jobs
        .get(&kube::runtime::reflector::ObjectRef::new(job_name).within(ns));
    let stored = in_store
        .as_deref()
        .filter(|j| is_job_of_claim(j, &claim_input(c), owner_uid))
        .filter(|j| super::harvest::terminal(j) || !running_due_a_read(ctx, &key, j))
        .cloned();
    let handed = ctx.inbox.result(to, &c.operation_id, c.attempt).is_some();
    let job = match stored {
        Some(j) => Some(j),
        None if in_store.is_none()
            && !handed
            && announces_its_end(c.type_)
            && ctx.job_reads.recent(&key) =>
        {
            return Ok(ClaimJob::Running(c.job_uid.clone()));
        }
        None => {
            let read = Api::<Job>::namespaced(ctx.client.clone(), ns)
                .get_opt(job_name)
                .await
                .map_err(kube_err(format!("reading Job {job_name}")))?;
            if read.is_some() {
                ctx.job_reads.mark(&key);
            }
            read
        }
    };
    Ok(match job {
        Some(j) if is_job_of_claim(&j, &claim_input(c), owner_uid) => {
            if handed || super::harvest::terminal(&j) {
                ctx.job_reads.forget(&key);
                ClaimJob::Ended(Box::new(j))
            } else {
                ClaimJob::Running(j.metadata.uid)
            }
        }
        Some(_) => ClaimJob::Foreign,
        None => ClaimJob::Missing {
            stored: stored_result(ctx, to, c).await?.is_some(),
        },
    })
}

/// How long a Job the store shows running is taken from the store alone,
/// and then how often it is read from the API server.
pub const STORE_TRUSTED_RUNNING: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether the receiver's hand-over announces the end of an operation's
/// Job (a read's result is handed over and wakes its pass; an Apply's is
/// stored).
fn announces_its_end(operation: OperationType) -> bool {
    operation != OperationType::Apply
}

/// The key of a Job in [`Context::job_reads`].
pub fn job_key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// Whether a Job the store shows running is due a read from the API
/// server: once it has run [`STORE_TRUSTED_RUNNING`], then each time its
/// age has doubled since the last read (at 1, 2, 4, 8… minutes).
fn running_due_a_read(ctx: &Context, key: &str, job: &Job) -> bool {
    age(job)
        .and_then(read_every)
        .is_some_and(|every| ctx.job_reads.due_after(key, every))
}

/// How often a Job the store shows running is read at `age`: not before
/// [`STORE_TRUSTED_RUNNING`], then after half its age since the last read.
fn read_every(age: std::time::Duration) -> Option<std::time::Duration> {
    (age > STORE_TRUSTED_RUNNING).then_some(age / 2)
}

/// How long ago `job` was created (none without a creation time).
fn age(job: &Job) -> Option<std::time::Duration> {
    let created = job.metadata.creation_timestamp.as_ref()?;
    let secs: u64 = now()
        .0
        .duration_since(created.0)
        .as_secs()
        .try_into()
        .ok()?;
    Some(std::time::Duration::from_secs(secs))
}

/// The attempt's result: handed over by the receiver, or stored by it.
pub async fn stored_result(
    ctx: &Context,
    to: &Addressee,
    c: &ActiveOperation,
) -> Result<Option<StoredResult>, Error> {
    if let Some(r) = ctx.inbox.result(to, &c.operation_id, c.attempt) {
        return Ok(Some(r));
    }
    let ns = to.namespace.as_str();
    Ok(receiver::harvest(&ctx.client, ns, &c.operation_id, c.attempt).await?)
}

/// The Pod a Job made (its termination messages are the fallback result).
pub async fn pod_of(ctx: &Context, ns: &str, job: &Job) -> Result<Option<Pod>, Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let Some(uid) = job.metadata.uid.as_deref() else {
        return Ok(None);
    };
    let list = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .map_err(kube_err("listing the Job's Pods"))?;
    Ok(list.items.into_iter().next())
}

/// How the one create of a claim's Job went.
#[derive(Debug)]
pub enum Dispatched {
    /// Created, or adopted after a restart: its UID.
    Created(Option<String>),
    /// None exists: why, with the reason the machine records.
    NotBuilt {
        /// `ConfigurationError`, `PodAdmissionRefused`, …
        reason: Reason,
        /// Names what is wrong.
        message: String,
    },
}

/// What the manager checks before it makes a Job: a Git host against the
/// source policy (Resolve; `Err` is the refusal), and that the snapshot an
/// operation mounts still holds its bound content.
pub async fn before_dispatch(
    ctx: &Context,
    ns: &str,
    src: &Source,
    c: &ActiveOperation,
) -> Result<Result<Option<Dispatched>, String>, Error> {
    if c.type_ == OperationType::Resolve
        && let (Some(git), Some(policy)) = (&src.git, &src.source_policy_from)
    {
        return Ok(match inputs::policy(&ctx.client, ns, policy).await {
            Ok((_, bytes)) => inputs::check_git_host(&bytes, &git.url).map(|()| None),
            Err(e) => Ok(Some(Dispatched::NotBuilt {
                reason: Reason::ConfigurationError,
                message: e.to_string(),
            })),
        });
    }
    if let Some(b) = &c.source
        && let Some(name) = &b.snapshot_name
    {
        let hold = snapshot::snapshot_still_holds(&ctx.client, ns, name, &b.content_digest)
            .await
            .map_err(kube_err(format!("reading snapshot {name}")))?;
        if let Some(refusal) = hold.refusal() {
            return Ok(Ok(Some(Dispatched::NotBuilt {
                reason: Reason::ConfigurationError,
                message: refusal,
            })));
        }
    }
    Ok(Ok(None))
}

/// The one Job create of a claim whose `dispatchStarted` is written: the
/// receiver's CA where the Pod can mount it, the Job — or the Job this claim
/// made before a restart, adopted by name — then the per-operation token
/// Secret, owned by the Job. The caller records the UID.
pub async fn create_job(
    ctx: &Context,
    ns: &str,
    owner_uid: &str,
    c: &ActiveOperation,
    job: &Job,
) -> Result<Dispatched, Error> {
    let Some(job_name) = job.metadata.name.clone() else {
        return Ok(Dispatched::NotBuilt {
            reason: Reason::ConfigurationError,
            message: "the Job has no name".into(),
        });
    };
    publish_receiver_ca(ctx, ns).await?;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let uid = match jobs.create(&PostParams::default(), job).await {
        Ok(created) => created.metadata.uid,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = jobs
                .get_opt(&job_name)
                .await
                .map_err(kube_err(format!("reading Job {job_name}")))?;
            match existing {
                Some(j) if is_job_of_claim(&j, &claim_input(c), owner_uid) => j.metadata.uid,
                _ => {
                    return Ok(Dispatched::NotBuilt {
                        reason: Reason::ConfigurationError,
                        message: format!("a Job named {job_name} exists and is not this claim's"),
                    });
                }
            }
        }
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => {
            return Ok(Dispatched::NotBuilt {
                reason: Reason::PodAdmissionRefused,
                message: format!("Job {job_name} refused: {}", e.message),
            });
        }
        Err(e) => return Err(kube_err(format!("creating Job {job_name}"))(e)),
    };
    // The create's answer stands for a read until the watch shows the Job.
    ctx.job_reads.mark(&job_key(ns, &job_name));
    tracing::info!(namespace = ns, job = %job_name, operation = ?c.type_, "Job created");
    ctx.fault(FaultPoint::AfterJobCreate, c.type_);
    Ok(Dispatched::Created(uid))
}

/// The receiver's CA, where this namespace's Pods can mount it.
pub(super) async fn publish_receiver_ca(ctx: &Context, ns: &str) -> Result<(), Error> {
    let pem = ctx
        .receiver_ca
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let cm = receiver_ca_config_map(ns, &pem);
    // Published already, with this CA: the metadata store says so.
    let digest = cm
        .annotations()
        .get(crate::api::annotations::RECEIVER_CA_DIGEST);
    let published = ctx.stores().config_maps.find(|m| {
        m.metadata.namespace.as_deref() == Some(ns)
            && m.metadata.name == cm.metadata.name
            && m.annotations()
                .get(crate::api::annotations::RECEIVER_CA_DIGEST)
                == digest
    });
    if published.is_some() {
        return Ok(());
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let name = cm.name_any();
    api.patch(
        &name,
        &PatchParams::apply(crate::execution::job::MANAGED_BY).force(),
        &Patch::Apply(&cm),
    )
    .await
    .map_err(kube_err(format!("publishing ConfigMap {name}")))?;
    Ok(())
}

/// What taking a ConfigMap source's snapshot gave.
#[derive(Debug)]
pub enum Snapshot {
    /// The resolution to record.
    Taken(Box<SourceStatus>),
    /// The source policy refused it, naming the rule.
    Refused(String),
    /// The source or its policy is misconfigured, naming it.
    Invalid(String),
    /// The API server could not be asked; try again soon.
    Later,
}

/// Resolve for a ConfigMap source: the manager's snapshot, no Job.
pub async fn take_snapshot<K>(
    ctx: &Context,
    owner: &K,
    source: Option<&ConfigMapSource>,
    policy: Option<&crate::api::common::ConfigMapKeyRef>,
) -> Snapshot
where
    K: Resource<DynamicType = ()>,
{
    let Some(source) = source else {
        return Snapshot::Invalid("spec.source.configMap is not set".into());
    };
    let owner = match snapshot::Owner::of(owner) {
        Ok(o) => o,
        Err(e) => return Snapshot::Invalid(e.to_string()),
    };
    match snapshot::resolve_configmap(&ctx.client, &owner, source, policy).await {
        Ok(res) => Snapshot::Taken(Box::new(res.source_status(Some(now())))),
        Err(e @ ResolveError::Refused { .. }) => Snapshot::Refused(e.to_string()),
        Err(e) if e.is_transient() => {
            tracing::info!(error = %e, "snapshot not taken yet");
            Snapshot::Later
        }
        Err(e) => Snapshot::Invalid(e.to_string()),
    }
}

/// Deletes the owner's snapshots that nothing in `named` names any more.
pub async fn collect_snapshots<K>(ctx: &Context, owner: &K, named: &[String]) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>,
{
    if let Ok(owner) = snapshot::Owner::of(owner) {
        let ns = owner.namespace.clone();
        let candidates = config_maps_in(ctx, &ns);
        snapshot::collect_snapshots_among(&ctx.client, &owner, named, candidates)
            .await
            .map_err(kube_err("collecting snapshots"))?;
    }
    Ok(())
}

/// Cleans every ended Job of the resource (found by `selector`) that no
/// claim attempt waits on: its cleanup TTL and the stored results of an
/// operation that is over. A sweep rather than a memory of
/// the pass, so a manager stopped right after an outcome was written still
/// cleans up.
pub async fn sweep(
    ctx: &Context,
    ns: &str,
    owner_uid: &str,
    selector: &str,
    claim: Option<&ActiveOperation>,
) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    // The manager's Job store, not a LIST: a Job that ended after it was
    // last delivered is swept by the pass its own event wakes.
    let (key, value) = selector.split_once('=').unwrap_or((selector, ""));
    // Allocation-free: the filter runs over every Job the manager
    // watches, on every pass (a third of the manager's CPU at 1,000
    // schemas when it cloned each Job's namespace).
    let listed = ctx.stores().jobs.state_filter(|j| {
        let m = &j.metadata;
        m.namespace.as_deref() == Some(ns)
            && m.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
                == Some(value)
    });
    for job in listed {
        let job = (*job).clone();
        let name = job.name_any();
        let ours = job
            .owner_references()
            .iter()
            .any(|o| o.uid == owner_uid && o.controller == Some(true));
        let has_ttl = job
            .spec
            .as_ref()
            .is_some_and(|s| s.ttl_seconds_after_finished.is_some());
        let current = claim.is_some_and(|c| c.job_name.as_deref() == Some(name.as_str()));
        if !ours || current || !super::harvest::terminal(&job) {
            continue;
        }
        // A read's Job (its TTL set at creation) takes its stored result
        // with it.
        if has_ttl {
            continue;
        }
        let ttl = crate::execution::job::harvested_ttl_patch(ctx.config.harvested_ttl_seconds);
        ok_if_gone(
            jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&ttl))
                .await,
        )
        .map_err(kube_err(format!("setting the TTL of Job {name}")))?;
        let op = job
            .annotations()
            .get(crate::execution::job::ANNOTATION_OPERATION_ID)
            .cloned();
        if let Some(op) = op
            && claim.is_none_or(|c| c.operation_id != op)
        {
            let attempt = job
                .annotations()
                .get(crate::api::annotations::ANNOTATION_ATTEMPT)
                .and_then(|a| a.parse().ok());
            let candidates = config_maps_in(ctx, ns);
            receiver::discard_among(&ctx.client, ns, &op, attempt, candidates).await?;
        }
    }
    Ok(())
}

/// The metadata of the ConfigMaps in `ns`, from the manager's store.
fn config_maps_in(
    ctx: &Context,
    ns: &str,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> {
    ctx.stores()
        .config_maps
        .state_filter(|cm| cm.metadata.namespace.as_deref() == Some(ns))
        .into_iter()
        .map(|cm| cm.metadata.clone())
        .collect()
}

/// A delete or patch of what is already gone did what it meant to.
fn ok_if_gone<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Publishes an Event about `obj`; best effort: status and the journal are
/// the record.
pub async fn event<K>(ctx: &Context, obj: &K, warning: bool, reason: Reason, message: String)
where
    K: Resource<DynamicType = ()>,
{
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: format!("{reason:?}"),
        note: Some(message),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(object = %obj.name_any(), error = %e, "event not published");
    }
}

/// Adds or removes `finalizer`, guarded by the object's resourceVersion;
/// answers the object as stored when it wrote.
pub async fn set_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    want: bool,
) -> Result<Option<K>, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let has = obj.finalizers().iter().any(|f| f == finalizer);
    if has == want {
        return Ok(None);
    }
    let mut list: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if want {
        list.push(finalizer.into());
    }
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": list,
            "resourceVersion": obj.meta().resource_version,
        }
    });
    let name = obj.name_any();
    let stored = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!("updating the finalizer of {name}")))?;
    Ok(Some(stored))
}

/// Whether a dispatched claim's Job still runs: deletion waits for an Apply
/// (and a proof's read) to end, so the database is never left in a state
/// nothing recorded.
pub async fn job_still_runs(ctx: &Context, ns: &str, c: &ActiveOperation) -> Result<bool, Error> {
    let Some(name) = &c.job_name else {
        return Ok(false);
    };
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let job = jobs
        .get_opt(name)
        .await
        .map_err(kube_err(format!("reading Job {name}")))?;
    Ok(job.as_ref().is_some_and(|j| !super::harvest::terminal(j)))
}

/// Releases the Lease a claim holds and any release owed (deletion).
pub async fn release_held(
    ctx: &Context,
    claim: Option<&ActiveOperation>,
    owed: Option<&crate::api::status::PendingLockRelease>,
) -> Result<(), Error> {
    let held = claim.and_then(|c| {
        Some(crate::api::status::PendingLockRelease {
            coordination_digest: c.coordination_digest.clone()?,
            operation_id: c.operation_id.clone(),
            lease_epoch: c.lease_epoch.clone()?,
            lease_duration_seconds: c.lease_duration_seconds.unwrap_or(15),
        })
    });
    for release in held.iter().chain(owed) {
        ctx.leases.release(release, None).await?;
    }
    Ok(())
}

/// How dispatching a claim went, for the family's machine.
#[derive(Debug)]
pub enum Dispatch {
    /// The source was refused before any Job (a Git host), naming the rule.
    Refused(String),
    /// No Job exists: why.
    NotBuilt {
        /// `ConfigurationError`, `PodAdmissionRefused`, …
        reason: Reason,
        /// Names what is wrong.
        message: String,
    },
    /// The one Job exists; its UID, to record on the claim.
    Created(Option<String>),
}

/// Dispatches a claim whose `dispatchStarted` is written: the manager's
/// checks, the Job built from `input`, and its one create (or adoption).
pub async fn dispatch<K>(
    ctx: &Context,
    obj: &K,
    src: &Source,
    c: &ActiveOperation,
    input: Result<crate::execution::job::JobInput, String>,
) -> Result<Dispatch, Error>
where
    K: Resource<DynamicType = ()>,
{
    ctx.fault(FaultPoint::AfterClaim, c.type_);
    let ns = obj.namespace().unwrap_or_default();
    let owner_uid = obj.meta().uid.clone().unwrap_or_default();
    let dispatched = match before_dispatch(ctx, &ns, src, c).await? {
        Err(message) => return Ok(Dispatch::Refused(message)),
        Ok(Some(refused)) => refused,
        Ok(None) => match bound_input(ctx, &ns, src, c, input).await {
            Err((reason, message)) => Dispatched::NotBuilt { reason, message },
            Ok(job) => {
                if obj.controller_owner_ref(&()).is_none() {
                    return Err(Error::NotStored(obj.name_any()));
                }
                create_job(ctx, &ns, &owner_uid, c, &job).await?
            }
        },
    };
    Ok(match dispatched {
        Dispatched::NotBuilt { reason, message } => Dispatch::NotBuilt { reason, message },
        Dispatched::Created(uid) => Dispatch::Created(uid),
    })
}

/// The input bound to what a Flux source names now, and built: why not,
/// with the reason.
async fn bound_input(
    ctx: &Context,
    ns: &str,
    src: &Source,
    c: &ActiveOperation,
    input: Result<crate::execution::job::JobInput, String>,
) -> Result<Job, (Reason, String)> {
    let mut input = input.map_err(|m| (Reason::ConfigurationError, m))?;
    super::flux::bind(&ctx.client, ns, src, c, &mut input).await?;
    build_job(&input).map_err(|e| (Reason::ConfigurationError, e.to_string()))
}

/// Sets one condition of an approval (schema or migration) through its
/// status: `Stale` when its plan retired, `Consumed` when an Apply spent it.
pub async fn mark_approval<K>(
    api: &Api<K>,
    mut a: K,
    status: impl FnOnce(&mut K) -> &mut Option<crate::api::approval::ApprovalStatus>,
    type_: crate::api::condition::ApprovalConditionType,
    truth: crate::api::condition::ConditionStatus,
    reason: Reason,
    message: &str,
) -> Result<(), Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = a.name_any();
    let generation = a.meta().generation;
    let st = status(&mut a).get_or_insert_with(Default::default);
    crate::lifecycle::conditions::set(
        &mut st.conditions,
        type_,
        truth,
        reason,
        message,
        generation,
        &now(),
    );
    api.replace_status(&name, &PostParams::default(), &a)
        .await
        .map_err(kube_err(format!("marking approval {name} {type_:?}")))?;
    Ok(())
}

/// What moved the generation since status last observed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerationMove {
    /// Only `spec.suspend`: a suspend or a resume, which keeps a proof owed.
    SuspendOnly,
    /// Anything else in the spec (or status records no digest to tell by:
    /// it was written by a release before the digest).
    Spec,
}

/// Compares the spec with the one status describes (its generation and
/// spec digest, `spec.suspend` aside): status holds it, so any manager, and
/// one restarted, tells a resume from an edit.
pub fn generation_move<S: Serialize>(
    observed: Option<i64>,
    observed_digest: Option<&str>,
    generation: Option<i64>,
    spec: &S,
) -> Option<GenerationMove> {
    let digest = crate::lifecycle::common::spec_digest(spec);
    let before = observed.zip(observed_digest.map(str::to_string));
    classify(before.as_ref(), observed, generation, digest.as_deref())
}

/// What moved the generation from `observed` to `now`, given the spec digest
/// remembered `before` (generation, digest) and the one now.
fn classify(
    before: Option<&(i64, String)>,
    observed: Option<i64>,
    now: Option<i64>,
    digest: Option<&str>,
) -> Option<GenerationMove> {
    // 0 is the CRD's default on a resource no manager has read: nothing
    // was observed, so nothing moved.
    let (Some(observed), Some(now)) = (observed.filter(|g| *g > 0), now) else {
        return None;
    };
    if observed == now {
        return None;
    }
    Some(match (before, digest) {
        (Some((g, d)), Some(now_digest)) if *g == observed && d == now_digest => {
            GenerationMove::SuspendOnly
        }
        _ => GenerationMove::Spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_the_store_shows_running_is_trusted_for_a_minute_then_read_as_its_age_doubles() {
        let created = |secs_ago: i64| {
            let mut j = Job::default();
            j.metadata.creation_timestamp = Some(Time(
                now().0 - k8s_openapi::jiff::SignedDuration::from_secs(secs_ago),
            ));
            j
        };
        let every = |secs_ago| age(&created(secs_ago)).and_then(read_every);
        assert_eq!(every(10), None);
        assert_eq!(every(60), None);
        let at_66 = every(66).expect("read after a minute");
        assert!((32..=34).contains(&at_66.as_secs()), "{at_66:?}");
        let at_600 = every(600).expect("read");
        assert!((299..=301).contains(&at_600.as_secs()), "{at_600:?}");
        assert_eq!(age(&Job::default()), None, "no creation time: never read");
    }

    #[test]
    fn only_a_read_is_taken_as_running_before_the_watch_shows_its_job() {
        for read in [
            OperationType::Resolve,
            OperationType::Verify,
            OperationType::Observe,
            OperationType::Plan,
            OperationType::History,
        ] {
            assert!(announces_its_end(read), "{read:?}");
        }
        assert!(!announces_its_end(OperationType::Apply));
    }

    #[test]
    fn a_running_jobs_reads_come_as_its_age_doubles() {
        // `Paced::due_after`, second by second (its own tests hold it to
        // this): a read when the time since the last is at least the pace.
        let mut last: Option<u64> = None;
        let mut reads = Vec::new();
        for s in 1..=540u64 {
            let Some(every) = read_every(std::time::Duration::from_secs(s)) else {
                continue;
            };
            let every = every.max(STORE_TRUSTED_RUNNING);
            if last.is_none_or(|l| std::time::Duration::from_secs(s - l) >= every) {
                reads.push(s);
                last = Some(s);
            }
        }
        // Four reads over a nine-minute Job, where a read a minute made eight.
        assert_eq!(reads, vec![61, 122, 244, 488]);
    }

    #[test]
    fn only_the_suspend_flag_moved_is_a_suspend_or_resume() {
        let before = (4, "d".to_string());
        assert_eq!(classify(Some(&before), Some(4), Some(4), Some("d")), None);
        assert_eq!(
            classify(Some(&before), Some(4), Some(5), Some("d")),
            Some(GenerationMove::SuspendOnly)
        );
        assert_eq!(
            classify(Some(&before), Some(4), Some(5), Some("e")),
            Some(GenerationMove::Spec),
            "another field moved too"
        );
        assert_eq!(
            classify(None, Some(4), Some(5), Some("d")),
            Some(GenerationMove::Spec),
            "a status without a digest cannot tell"
        );
        assert_eq!(
            classify(Some(&(3, "d".into())), Some(4), Some(5), Some("d")),
            Some(GenerationMove::Spec),
            "remembered at another generation than status observed"
        );
        assert_eq!(classify(Some(&before), None, Some(5), Some("d")), None);
        assert_eq!(
            classify(None, Some(0), Some(1), Some("d")),
            None,
            "the CRD's default observedGeneration 0 is no observation"
        );
    }
}
