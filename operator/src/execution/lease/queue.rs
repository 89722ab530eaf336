//! Turns at a realm Lease among this manager's operations. A freed Lease
//! went to whichever operation asked first, and an interval Plan asks the
//! moment its Observe lands while a waiter asks only on its retry, behind
//! every other resource's turn: under load a waiter could find its
//! database's Lease taken on every ask for an hour (the 1,000-schema run at
//! `de2e119`). So each Lease keeps its waiters oldest first; a free Lease
//! goes to the oldest, and the watch wakes it when the Lease is released.
//!
//! Only this manager's operations queue: another manager's are not known
//! here, and the Lease's `resourceVersion` precondition still decides any
//! race between managers. A waiter that stops asking (its claim dropped or
//! replaced, its resource deleted) leaves the queue after
//! [`STOPPED_ASKING`], or [`WOKEN_GRACE`] after it was woken to take the
//! Lease: a Lease is not kept free for long for one that will not come.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::execution::receiver::Addressee;

/// A waiter that has not asked for this long no longer waits: well past the
/// 5 s retry even when a thousand resources take turns (about a minute).
pub const STOPPED_ASKING: Duration = Duration::from_secs(120);
/// A waiter woken to take its free Lease that has not asked since, this
/// long after, is not coming: a woken pass goes before every turn, and
/// asked within 7 s under 1,000 schemas (p90 2.2 s).
pub const WOKEN_GRACE: Duration = Duration::from_secs(15);

#[derive(Clone, Debug)]
struct Waiter {
    operation_id: String,
    who: Addressee,
    asked: Instant,
    /// When the watch last woke it to take the free Lease.
    woken: Option<Instant>,
}

impl Waiter {
    /// Woken and not yet come.
    fn woken_since_asked(&self) -> bool {
        self.woken.is_some_and(|w| self.asked < w)
    }

    /// Wakes it, unless a wake it has not answered is under way; whom to
    /// wake.
    fn wake(&mut self, now: Instant) -> Option<Addressee> {
        if self.woken_since_asked() {
            return None;
        }
        self.woken = Some(now);
        Some(self.who.clone())
    }

    fn still_waits(&self, now: Instant) -> bool {
        let gone = |since: Instant, grace| now.saturating_duration_since(since) >= grace;
        let not_coming = self
            .woken
            .is_some_and(|w| self.asked < w && gone(w, WOKEN_GRACE));
        !gone(self.asked, STOPPED_ASKING) && !not_coming
    }
}

/// The waiters of every realm Lease, by Lease name.
#[derive(Debug, Default)]
pub struct Queue {
    leases: HashMap<String, VecDeque<Waiter>>,
}

impl Queue {
    /// The oldest waiter at `lease` still asking at `now`; those that
    /// stopped are dropped.
    fn first(&mut self, lease: &str, now: Instant) -> Option<&mut Waiter> {
        let waiters = self.leases.get_mut(lease)?;
        waiters.retain(|w| w.still_waits(now));
        if waiters.is_empty() {
            self.leases.remove(lease);
            return None;
        }
        self.leases.get_mut(lease)?.front_mut()
    }

    /// The operation ahead of `operation_id` at the free `lease` at `now`,
    /// and whom to wake to take it (the oldest waiter, unless a wake it has
    /// not answered is under way: a waiter that asked before the Lease was
    /// freed learns so here); `None` when it is first or nobody waits.
    pub fn ahead(
        &mut self,
        lease: &str,
        operation_id: &str,
        now: Instant,
    ) -> Option<(String, Option<Addressee>)> {
        let first = self.first(lease, now)?;
        if first.operation_id == operation_id {
            return None;
        }
        let wake = first.wake(now);
        Some((first.operation_id.clone(), wake))
    }

    /// `operation_id` of `who` was told to wait for `lease` at `now`: it
    /// joins the end, or keeps its place and is marked as still asking.
    pub fn wait(&mut self, lease: &str, operation_id: &str, who: &Addressee, now: Instant) {
        let waiters = self.leases.entry(lease.to_owned()).or_default();
        match waiters.iter_mut().find(|w| w.operation_id == operation_id) {
            Some(w) => w.asked = now,
            None => waiters.push_back(Waiter {
                operation_id: operation_id.to_owned(),
                who: who.clone(),
                asked: now,
                woken: None,
            }),
        }
    }

    /// `operation_id` holds `lease`: it waits no more.
    pub fn took(&mut self, lease: &str, operation_id: &str) {
        if let Some(waiters) = self.leases.get_mut(lease) {
            waiters.retain(|w| w.operation_id != operation_id);
            if waiters.is_empty() {
                self.leases.remove(lease);
            }
        }
    }

    /// Whom to wake now that `lease` is free: its oldest waiter still
    /// asking at `now`, which has [`WOKEN_GRACE`] to come; `None` as well
    /// when a wake it has not answered is under way.
    pub fn next(&mut self, lease: &str, now: Instant) -> Option<Addressee> {
        self.first(lease, now)?.wake(now)
    }

    /// How many operations wait, over every Lease.
    pub fn len(&self) -> usize {
        self.leases.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str) -> Addressee {
        Addressee {
            kind: "PtahSchema".into(),
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    /// The operation ahead of `op` at the free Lease, if any.
    fn ahead(q: &mut Queue, lease: &str, op: &str, now: Instant) -> Option<String> {
        q.ahead(lease, op, now).map(|(first, _)| first)
    }

    #[test]
    fn a_free_lease_goes_to_the_operation_that_waited_longest() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t + s(1));
        // An interval Plan that asks first the moment the Lease is free.
        assert_eq!(ahead(&mut q, "realm", "op-new", t).as_deref(), Some("op-b"));
        assert_eq!(ahead(&mut q, "realm", "op-c", t).as_deref(), Some("op-b"));
        assert_eq!(ahead(&mut q, "realm", "op-b", t), None);
        q.took("realm", "op-b");
        assert_eq!(ahead(&mut q, "realm", "op-new", t).as_deref(), Some("op-c"));
        q.took("realm", "op-c");
        assert_eq!(ahead(&mut q, "realm", "op-new", t), None);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn the_oldest_waiter_is_woken_once_until_it_comes() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t);
        // The watch shows the Lease released: two is woken.
        assert_eq!(q.next("realm", t + s(1)), Some(who("b")));
        // Three asks first and is told to wait; two is not woken again.
        assert_eq!(
            q.ahead("realm", "op-c", t + s(1)),
            Some(("op-b".into(), None))
        );
        assert_eq!(q.next("realm", t + s(1)), None);
        // Two asks and the Lease is taken by another manager meanwhile:
        // when it is free again, two is woken again, by the watch or by
        // whoever finds it free first.
        q.wait("realm", "op-b", &who("b"), t + s(2));
        assert_eq!(
            q.ahead("realm", "op-c", t + s(3)),
            Some(("op-b".into(), Some(who("b"))))
        );
    }

    #[test]
    fn asking_again_keeps_a_waiters_place() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t);
        q.wait("realm", "op-b", &who("b"), t + s(30));
        assert_eq!(ahead(&mut q, "realm", "op-c", t).as_deref(), Some("op-b"));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_waiter_that_stopped_asking_leaves_the_queue() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t + s(60));
        let later = t + STOPPED_ASKING;
        // op-b's claim was dropped: op-c is first now.
        assert_eq!(q.next("realm", later), Some(who("c")));
        let much_later = later + STOPPED_ASKING;
        assert_eq!(ahead(&mut q, "realm", "op-new", much_later), None);
        assert_eq!(q.next("realm", much_later), None);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_woken_waiter_that_does_not_come_leaves_the_queue() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t);
        // Two is woken and comes, then finds the Lease taken again: it keeps
        // its place however long the Lease stays taken.
        assert_eq!(q.next("realm", t + s(1)), Some(who("b")));
        q.wait("realm", "op-b", &who("b"), t + s(2));
        q.wait("realm", "op-c", &who("c"), t + s(2));
        assert_eq!(q.next("realm", t + s(40)), Some(who("b")));
        // Woken again, it does not come (its resource was deleted): after
        // the grace the Lease goes to three, who is woken in turn.
        let grace_ends = t + s(40) + WOKEN_GRACE;
        q.wait("realm", "op-c", &who("c"), grace_ends - s(1));
        assert_eq!(
            ahead(&mut q, "realm", "op-c", grace_ends - s(1)).as_deref(),
            Some("op-b")
        );
        assert_eq!(ahead(&mut q, "realm", "op-c", grace_ends), None);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn each_lease_has_its_own_queue() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm-1", "op-b", &who("b"), t);
        assert_eq!(ahead(&mut q, "realm-2", "op-c", t), None);
        assert_eq!(q.next("realm-2", t), None);
        q.took("realm-2", "op-b");
        assert_eq!(ahead(&mut q, "realm-1", "op-c", t).as_deref(), Some("op-b"));
        q.took("realm-1", "op-b");
        assert_eq!(q.len(), 0);
    }
}
