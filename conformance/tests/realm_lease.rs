//! The database-realm Lease (`operator::execution::lease`) on the harness API
//! server: a free Lease is taken at once under a fresh epoch; a foreign one
//! only after this process saw it unchanged for its full duration on its own
//! monotonic clock (never because its wall-clock `renewTime` is old); a claim
//! whose epoch was replaced, or whose renewal comes too late, has lost
//! continuity; a release frees the Lease only under its own epoch. Each test
//! uses its own namespace as the coordination namespace and Leases of 5 s,
//! the shortest a claim may record.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::wait;
use operator::api::realm::LEASE_RETRY;
use operator::api::status::PendingLockRelease;
use operator::execution::lease::{
    ANNOTATION_LEASE_EPOCH, ANNOTATION_LEASE_OPERATION, Acquired, Continuity, Leases, lease_name,
};
use operator::execution::receiver::Addressee;
use operator::lifecycle::read_request::sha256_hex;

/// The shortest Lease a claim records (the CRD's minimum).
const DURATION: i32 = 5;
/// Longest wait for a takeover: several Lease durations on a busy machine.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two acquisition attempts while a Lease is busy.
const PROBE: Duration = Duration::from_millis(250);

/// One test's coordination namespace, deleted at the end (see [`TestNamespace`]).
struct Scope {
    ns: TestNamespace,
    /// A database no other test coordinates on.
    digest: String,
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        let ns = TestNamespace::new(harness, "lease", test, NamespaceSpec::default()).await?;
        let digest = sha256_hex(format!("database of {}", ns.name()).as_bytes());
        Ok(Scope { ns, digest })
    }

    /// The Leases of the manager `holder`, as a separate process would have
    /// them (its own table of foreign Leases).
    fn manager(&self, holder: &str) -> Leases {
        Leases::new(self.ns.client().clone(), self.ns.name(), holder)
    }

    fn leases(&self) -> Api<Lease> {
        self.ns.api()
    }

    async fn lease(&self) -> anyhow::Result<Lease> {
        self.leases()
            .get(&lease_name(&self.digest))
            .await
            .context("reading the realm Lease")
    }

    async fn holder(&self) -> anyhow::Result<Option<String>> {
        Ok(self.lease().await?.spec.and_then(|s| s.holder_identity))
    }

    fn release(&self, operation_id: &str, epoch: &str) -> PendingLockRelease {
        PendingLockRelease {
            coordination_digest: self.digest.clone(),
            operation_id: operation_id.to_owned(),
            lease_epoch: epoch.to_owned(),
            lease_duration_seconds: DURATION,
        }
    }
}

/// The resource an operation is for; the queue of waiters wakes it.
fn resource_named(name: &str) -> Addressee {
    Addressee {
        kind: "PtahSchema".into(),
        namespace: "shop".into(),
        name: name.into(),
    }
}

fn resource() -> Addressee {
    resource_named("orders")
}

fn operation(n: u8) -> String {
    sha256_hex(&[n])
}

fn is_epoch(e: &str) -> bool {
    e.strip_prefix("v1-").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The epoch of a `Held`, or the test fails naming what it got.
fn held(what: &str, a: Acquired) -> anyhow::Result<String> {
    match a {
        Acquired::Held {
            epoch,
            duration_seconds,
        } => {
            anyhow::ensure!(
                is_epoch(&epoch),
                "{what}: epoch {epoch:?} is not v1- and 32 hex"
            );
            anyhow::ensure!(duration_seconds == DURATION, "{what}: duration");
            Ok(epoch)
        }
        other => bail!("{what}: expected Held, got {other:?}"),
    }
}

/// Tries `acquire` until it is `Held`, at most [`TAKEOVER_TIMEOUT`]; returns
/// the epoch and every answer before it.
async fn acquire_until_held(
    leases: &Leases,
    digest: &str,
    operation_id: &str,
) -> anyhow::Result<(String, Vec<Acquired>)> {
    let mut before = Vec::new();
    let epoch = wait("the takeover of the realm Lease", TAKEOVER_TIMEOUT, async {
        loop {
            match leases
                .acquire(digest, operation_id, DURATION, &resource())
                .await?
            {
                Acquired::Held { epoch, .. } => return anyhow::Ok(epoch),
                busy => {
                    before.push(busy);
                    tokio::time::sleep(PROBE).await;
                }
            }
        }
    })
    .await?;
    Ok((epoch, before))
}

#[tokio::test]
async fn a_foreign_lease_is_taken_over_only_after_it_was_seen_unchanged_for_its_duration()
-> anyhow::Result<()> {
    let scope = Scope::new("takeover").await?;
    let (a, b) = (scope.manager("manager-a"), scope.manager("manager-b"));
    let (op_a, op_b) = (operation(1), operation(2));

    // Free: taken at once.
    let epoch_a = held(
        "first acquisition",
        a.acquire(&scope.digest, &op_a, DURATION, &resource())
            .await?,
    )?;
    let lease = scope.lease().await?;
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(ANNOTATION_LEASE_EPOCH),
        Some(&epoch_a),
        "the epoch is on the Lease"
    );
    assert_eq!(annotations.get(ANNOTATION_LEASE_OPERATION), Some(&op_a));
    assert_eq!(
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some("manager-a")
    );
    assert_eq!(
        a.renew(&scope.digest, &op_a, &epoch_a).await?,
        Continuity::Held
    );

    // Another holder is Busy; a renewal by the holder starts its count again
    // (it saw the Lease change), so it is told to wait the full duration.
    let first = b
        .acquire(&scope.digest, &op_b, DURATION, &resource())
        .await?;
    assert_eq!(
        first,
        Acquired::Busy {
            holder: "manager-a".into(),
            retry_after: Duration::from_secs(DURATION as u64),
        }
    );
    for _ in 0..2 {
        assert_eq!(
            a.renew(&scope.digest, &op_a, &epoch_a).await?,
            Continuity::Held
        );
        assert_eq!(
            b.acquire(&scope.digest, &op_b, DURATION, &resource())
                .await?,
            Acquired::Busy {
                holder: "manager-a".into(),
                retry_after: Duration::from_secs(DURATION as u64),
            },
            "a renewal restarts the observation"
        );
    }

    // A stops renewing: B is Busy until it has itself seen the Lease
    // unchanged for the full duration, then Held under a new epoch.
    let (epoch_b, before) = acquire_until_held(&b, &scope.digest, &op_b).await?;
    assert!(is_epoch(&epoch_b), "{epoch_b}");
    assert_ne!(epoch_b, epoch_a);
    assert!(!before.is_empty(), "B took the Lease without observing it");
    for answer in &before {
        match answer {
            Acquired::Busy {
                holder,
                retry_after,
            } => {
                assert_eq!(holder, "manager-a");
                assert!(*retry_after <= Duration::from_secs(DURATION as u64));
            }
            other => panic!("expected Busy before the takeover, got {other:?}"),
        }
    }
    assert_eq!(scope.holder().await?.as_deref(), Some("manager-b"));

    // A's claim has lost continuity; B's holds.
    assert_eq!(
        a.renew(&scope.digest, &op_a, &epoch_a).await?,
        Continuity::Lost
    );
    assert_eq!(
        b.renew(&scope.digest, &op_b, &epoch_b).await?,
        Continuity::Held
    );

    // A release under A's stale epoch does nothing.
    a.release(&scope.release(&op_a, &epoch_a), None).await?;
    assert_eq!(scope.holder().await?.as_deref(), Some("manager-b"));
    assert_eq!(
        b.renew(&scope.digest, &op_b, &epoch_b).await?,
        Continuity::Held
    );

    // A release under the current epoch frees it, keeping the object, and is
    // idempotent; a third manager then takes it at once.
    b.release(&scope.release(&op_b, &epoch_b), None).await?;
    assert_eq!(scope.holder().await?, None, "released: no holder");
    b.release(&scope.release(&op_b, &epoch_b), None).await?;
    assert_eq!(
        b.renew(&scope.digest, &op_b, &epoch_b).await?,
        Continuity::Lost
    );
    let c = scope.manager("manager-c");
    let epoch_c = held(
        "acquisition of a released Lease",
        c.acquire(&scope.digest, &operation(3), DURATION, &resource())
            .await?,
    )?;
    assert!(epoch_c != epoch_a && epoch_c != epoch_b);
    assert_eq!(scope.holder().await?.as_deref(), Some("manager-c"));
    Ok(())
}

#[tokio::test]
async fn an_old_wall_clock_renew_time_is_no_takeover() -> anyhow::Result<()> {
    let scope = Scope::new("wallclock").await?;
    // Held by a manager whose last renewal, by the wall clock, was years ago.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {
            "name": lease_name(&scope.digest),
            "annotations": {
                ANNOTATION_LEASE_EPOCH: format!("v1-{}", "0".repeat(32)),
                ANNOTATION_LEASE_OPERATION: operation(9),
            },
        },
        "spec": {
            "holderIdentity": "manager-gone",
            "leaseDurationSeconds": DURATION,
            "acquireTime": "2020-01-01T00:00:00.000000Z",
            "renewTime": "2020-01-01T00:00:00.000000Z",
        },
    }))?;
    scope
        .leases()
        .create(&PostParams::default(), &lease)
        .await?;

    let b = scope.manager("manager-b");
    assert_eq!(
        b.acquire(&scope.digest, &operation(2), DURATION, &resource())
            .await?,
        Acquired::Busy {
            holder: "manager-gone".into(),
            retry_after: Duration::from_secs(DURATION as u64),
        },
        "a Lease never observed is not taken, however old its renewTime"
    );
    let (epoch, before) = acquire_until_held(&b, &scope.digest, &operation(2)).await?;
    assert!(is_epoch(&epoch));
    assert!(
        before
            .iter()
            .all(|a| matches!(a, Acquired::Busy { holder, .. } if holder == "manager-gone"))
    );
    assert_eq!(scope.holder().await?.as_deref(), Some("manager-b"));
    Ok(())
}

#[tokio::test]
async fn reacquisition_for_the_same_operation_keeps_its_epoch_by_any_manager() -> anyhow::Result<()>
{
    let scope = Scope::new("reacquire").await?;
    let (a, b) = (scope.manager("manager-a"), scope.manager("manager-b"));
    let op = operation(1);
    let first = held(
        "first acquisition",
        a.acquire(&scope.digest, &op, DURATION, &resource()).await?,
    )?;
    // A restart of the holder, or a replica or another installation serving
    // the same stored claim: the claim's epoch, renewed, not a new one.
    let again = held(
        "re-acquisition by the holder",
        a.acquire(&scope.digest, &op, DURATION, &resource()).await?,
    )?;
    let other = held(
        "acquisition by another manager",
        b.acquire(&scope.digest, &op, DURATION, &resource()).await?,
    )?;
    assert_eq!(again, first, "the same operation keeps its epoch");
    assert_eq!(other, first, "whichever manager asks");
    assert_eq!(
        scope.holder().await?.as_deref(),
        Some("manager-a"),
        "the holder stays"
    );
    for m in [&a, &b] {
        assert_eq!(m.renew(&scope.digest, &op, &first).await?, Continuity::Held);
    }

    // Another operation is foreign to either manager: it waits.
    for m in [&a, &b] {
        assert!(matches!(
            m.acquire(&scope.digest, &operation(2), DURATION, &resource())
                .await?,
            Acquired::Busy { .. }
        ));
    }
    // And a renewal for another operation, even with the epoch, is Lost.
    assert_eq!(
        a.renew(&scope.digest, &operation(2), &first).await?,
        Continuity::Lost
    );
    Ok(())
}

#[tokio::test]
async fn a_renewal_after_the_lease_lapsed_is_lost() -> anyhow::Result<()> {
    let scope = Scope::new("lapsed").await?;
    let a = scope.manager("manager-a");
    let op = operation(1);
    let epoch = held(
        "acquisition",
        a.acquire(&scope.digest, &op, DURATION, &resource()).await?,
    )?;
    // The last renewal a minute ago: the lock interval was interrupted.
    let long_ago = k8s_openapi::jiff::Timestamp::now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))?;
    scope
        .leases()
        .patch(
            &lease_name(&scope.digest),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": MicroTime(long_ago)}})),
        )
        .await?;
    assert_eq!(a.renew(&scope.digest, &op, &epoch).await?, Continuity::Lost);
    // The same operation takes a lapsed Lease anew: a new epoch, so what
    // ran under the old one is not read as held throughout.
    let anew = held(
        "acquisition of the lapsed Lease",
        a.acquire(&scope.digest, &op, DURATION, &resource()).await?,
    )?;
    assert_ne!(anew, epoch);
    assert_eq!(a.renew(&scope.digest, &op, &anew).await?, Continuity::Held);
    Ok(())
}

#[tokio::test]
async fn racing_acquirers_of_a_free_lease_one_wins() -> anyhow::Result<()> {
    let scope = Scope::new("race").await?;
    let (a, b) = (scope.manager("manager-a"), scope.manager("manager-b"));
    let (op_a, op_b) = (operation(1), operation(2));
    let r = resource();
    let (ra, rb) = tokio::join!(
        a.acquire(&scope.digest, &op_a, DURATION, &r),
        b.acquire(&scope.digest, &op_b, DURATION, &r),
    );
    let held_by: Vec<&str> = [(ra?, "manager-a"), (rb?, "manager-b")]
        .iter()
        .filter(|(r, _)| matches!(r, Acquired::Held { .. }))
        .map(|(_, who)| *who)
        .collect();
    assert_eq!(held_by.len(), 1, "exactly one winner: {held_by:?}");
    assert_eq!(scope.holder().await?.as_deref(), held_by.first().copied());
    Ok(())
}

#[tokio::test]
async fn releasing_an_absent_lease_does_nothing() -> anyhow::Result<()> {
    let scope = Scope::new("absent").await?;
    let a = scope.manager("manager-a");
    a.release(
        &scope.release(&operation(1), &format!("v1-{}", "a".repeat(32))),
        None,
    )
    .await?;
    assert!(
        scope
            .leases()
            .get_opt(&lease_name(&scope.digest))
            .await?
            .is_none()
    );
    assert_eq!(
        a.renew(
            &scope.digest,
            &operation(1),
            &format!("v1-{}", "a".repeat(32))
        )
        .await?,
        Continuity::Lost
    );
    Ok(())
}

#[tokio::test]
async fn a_freed_lease_goes_to_the_operation_that_waited_longest() -> anyhow::Result<()> {
    let scope = Scope::new("queue").await?;
    let a = scope.manager("manager-a");
    let (op1, op2, op3) = (operation(1), operation(2), operation(3));
    let (r1, r2, r3) = (
        resource_named("one"),
        resource_named("two"),
        resource_named("three"),
    );
    let epoch1 = held(
        "first acquisition",
        a.acquire(&scope.digest, &op1, DURATION, &r1).await?,
    )?;
    // Two more operations of this manager wait, two before three.
    for (op, r) in [(&op2, &r2), (&op3, &r3), (&op2, &r2)] {
        assert!(
            matches!(
                a.acquire(&scope.digest, op, DURATION, r).await?,
                Acquired::Busy { ref holder, .. } if holder == "manager-a"
            ),
            "held for operation 1"
        );
    }
    assert_eq!(a.waiting(), 2);
    assert_eq!(
        a.freed(&scope.lease().await?, false),
        None,
        "a held Lease wakes nobody"
    );

    // Released: the watch's copy wakes two, and three, asking first, waits.
    a.release(&scope.release(&op1, &epoch1), None).await?;
    let released = scope.lease().await?;
    assert_eq!(a.freed(&released, false), Some(r2.clone()));
    assert_eq!(
        a.freed(&released, true),
        None,
        "two is woken once until it comes"
    );
    assert_eq!(
        a.acquire(&scope.digest, &op3, DURATION, &r3).await?,
        Acquired::Busy {
            holder: format!("operation {op2}, which has waited longer"),
            retry_after: LEASE_RETRY,
        }
    );
    assert_eq!(
        scope.holder().await?,
        None,
        "the free Lease is left for two"
    );
    let epoch2 = held(
        "the longest waiter",
        a.acquire(&scope.digest, &op2, DURATION, &r2).await?,
    )?;
    assert_eq!(a.waiting(), 1);

    // Then three, and nobody waits.
    a.release(&scope.release(&op2, &epoch2), None).await?;
    assert_eq!(a.freed(&scope.lease().await?, false), Some(r3.clone()));
    held(
        "the next waiter",
        a.acquire(&scope.digest, &op3, DURATION, &r3).await?,
    )?;
    assert_eq!(a.waiting(), 0);

    // The queue is this manager's: another manager's operation is not held
    // back by it (the Lease's own rules stand between managers).
    let b = scope.manager("manager-b");
    assert!(matches!(
        b.acquire(&scope.digest, &operation(4), DURATION, &resource()).await?,
        Acquired::Busy { ref holder, .. } if holder == "manager-a"
    ));
    Ok(())
}

#[tokio::test]
async fn an_apply_that_follows_its_own_plan_keeps_the_plans_place() -> anyhow::Result<()> {
    let scope = Scope::new("follows").await?;
    let a = scope.manager("manager-a");
    let (plan, waiter, apply) = (operation(1), operation(2), operation(3));
    let (one, two) = (resource_named("one"), resource_named("two"));
    let epoch = held(
        "one's Plan",
        a.acquire(&scope.digest, &plan, DURATION, &one).await?,
    )?;
    assert!(matches!(
        a.acquire(&scope.digest, &waiter, DURATION, &two).await?,
        Acquired::Busy { .. }
    ));
    // One's Plan releases the Lease with one's Apply to follow at once.
    a.release(&scope.release(&plan, &epoch), Some(&one)).await?;
    assert_eq!(scope.holder().await?, None, "released");
    let released = scope.lease().await?;
    assert_eq!(
        a.freed(&released, false),
        None,
        "nobody is woken for a Lease kept for an Apply"
    );
    assert_eq!(
        a.acquire(&scope.digest, &waiter, DURATION, &two).await?,
        Acquired::Busy {
            holder: format!("the apply that follows plan operation {plan}"),
            retry_after: LEASE_RETRY,
        }
    );
    let apply_epoch = held(
        "one's Apply, a new operation, in the Plan's place",
        a.acquire(&scope.digest, &apply, DURATION, &one).await?,
    )?;
    assert_eq!(a.waiting(), 1, "two still waits");
    // The Apply's release (and its proof's) then wakes two.
    a.release(&scope.release(&apply, &apply_epoch), None)
        .await?;
    assert_eq!(a.freed(&scope.lease().await?, false), Some(two.clone()));
    held(
        "two, next",
        a.acquire(&scope.digest, &waiter, DURATION, &two).await?,
    )?;
    Ok(())
}

#[tokio::test]
async fn the_watchs_copy_stands_in_for_a_read_and_a_stale_one_is_refused() -> anyhow::Result<()> {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    let scope = Scope::new("watched").await?;
    // Manager a's watch, fed by hand with copies read at chosen moments.
    let (store, mut watch) = reflector::store::<Lease>();
    let a = scope.manager("manager-a");
    a.watch(store);
    let b = scope.manager("manager-b");
    let (op1, op2, op3) = (operation(1), operation(2), operation(3));
    let r = resource();

    let epoch1 = held(
        "absent",
        a.acquire(&scope.digest, &op1, DURATION, &r).await?,
    )?;
    let taken = scope.lease().await?;
    watch.apply_watcher_event(&Event::Apply(taken.clone()));
    // Released over the watch's copy.
    a.release(&scope.release(&op1, &epoch1), None).await?;
    assert_eq!(scope.holder().await?, None);
    let free = scope.lease().await?;
    watch.apply_watcher_event(&Event::Apply(free.clone()));

    // B takes it; a's watch still shows it free: a's write over that copy
    // is refused by its resourceVersion, and b keeps it.
    let epoch2 = held("free", b.acquire(&scope.digest, &op2, DURATION, &r).await?)?;
    assert!(
        matches!(
            a.acquire(&scope.digest, &op3, DURATION, &r).await?,
            Acquired::Busy { .. }
        ),
        "a stale free copy does not take a held Lease"
    );
    assert_eq!(scope.holder().await?.as_deref(), Some("manager-b"));
    let lease = scope.lease().await?;
    let epoch_now = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LEASE_EPOCH).cloned());
    assert_eq!(epoch_now.as_deref(), Some(epoch2.as_str()));

    // A's watch shows b's hold; b releases, and a, releasing the same
    // epoch from its stale copy (a replica serving the same claim), is
    // refused by the precondition, reads, and writes nothing more.
    watch.apply_watcher_event(&Event::Apply(lease.clone()));
    b.release(&scope.release(&op2, &epoch2), None).await?;
    let after_b = scope.lease().await?;
    a.release(&scope.release(&op2, &epoch2), None).await?;
    let after_a = scope.lease().await?;
    assert_eq!(
        after_a.metadata.resource_version, after_b.metadata.resource_version,
        "nothing written over a Lease already released"
    );
    assert_eq!(after_a.spec.and_then(|s| s.holder_identity), None);
    Ok(())
}
