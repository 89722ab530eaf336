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
//! replaced) leaves the queue after [`STOPPED_ASKING`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::execution::receiver::Addressee;

/// A waiter that has not asked for this long no longer waits: well past the
/// 5 s retry even when a thousand resources take turns (about a minute).
pub const STOPPED_ASKING: Duration = Duration::from_secs(120);

#[derive(Clone, Debug)]
struct Waiter {
    operation_id: String,
    who: Addressee,
    asked: Instant,
}

/// The waiters of every realm Lease, by Lease name.
#[derive(Debug, Default)]
pub struct Queue {
    leases: HashMap<String, VecDeque<Waiter>>,
}

impl Queue {
    /// The oldest waiter at `lease` still asking at `now`; those that
    /// stopped are dropped.
    fn first(&mut self, lease: &str, now: Instant) -> Option<&Waiter> {
        let waiters = self.leases.get_mut(lease)?;
        waiters.retain(|w| now.saturating_duration_since(w.asked) < STOPPED_ASKING);
        if waiters.is_empty() {
            self.leases.remove(lease);
            return None;
        }
        self.leases.get(lease)?.front()
    }

    /// The operation ahead of `operation_id` at `lease` at `now`; `None`
    /// when it is first or nobody waits.
    pub fn ahead(&mut self, lease: &str, operation_id: &str, now: Instant) -> Option<String> {
        self.first(lease, now)
            .map(|w| w.operation_id.clone())
            .filter(|h| h != operation_id)
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
    /// asking at `now`.
    pub fn next(&mut self, lease: &str, now: Instant) -> Option<Addressee> {
        self.first(lease, now).map(|w| w.who.clone())
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

    #[test]
    fn a_free_lease_goes_to_the_operation_that_waited_longest() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t + Duration::from_secs(1));
        // An interval Plan that asks first the moment the Lease is free.
        assert_eq!(q.ahead("realm", "op-new", t).as_deref(), Some("op-b"));
        assert_eq!(q.ahead("realm", "op-c", t).as_deref(), Some("op-b"));
        assert_eq!(q.ahead("realm", "op-b", t), None);
        assert_eq!(q.next("realm", t), Some(who("b")));
        q.took("realm", "op-b");
        assert_eq!(q.ahead("realm", "op-new", t).as_deref(), Some("op-c"));
        assert_eq!(q.next("realm", t), Some(who("c")));
    }

    #[test]
    fn asking_again_keeps_a_waiters_place() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t);
        q.wait("realm", "op-b", &who("b"), t + Duration::from_secs(30));
        assert_eq!(q.ahead("realm", "op-c", t).as_deref(), Some("op-b"));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_waiter_that_stopped_asking_leaves_the_queue() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-b", &who("b"), t);
        q.wait("realm", "op-c", &who("c"), t + Duration::from_secs(60));
        let later = t + STOPPED_ASKING;
        // op-b's claim was dropped: op-c is first now.
        assert_eq!(q.ahead("realm", "op-new", later).as_deref(), Some("op-c"));
        assert_eq!(q.next("realm", later), Some(who("c")));
        let much_later = later + STOPPED_ASKING;
        assert_eq!(q.ahead("realm", "op-new", much_later), None);
        assert_eq!(q.next("realm", much_later), None);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn each_lease_has_its_own_queue() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm-1", "op-b", &who("b"), t);
        assert_eq!(q.ahead("realm-2", "op-c", t), None);
        assert_eq!(q.next("realm-2", t), None);
        q.took("realm-2", "op-b");
        assert_eq!(q.ahead("realm-1", "op-c", t).as_deref(), Some("op-b"));
        q.took("realm-1", "op-b");
        assert_eq!(q.len(), 0);
    }
}
