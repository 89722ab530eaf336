//! Turns at a realm Lease among this manager's operations. A freed Lease
//! went to whichever operation asked first, and an interval Plan asks the
//! moment its Observe lands while a waiter asks only on its retry, behind
//! every other resource's turn: under load a waiter could find its
//! database's Lease taken on every ask for an hour (the 1,000-schema run at
//! `de2e119`). So each Lease keeps its waiters oldest first; a free Lease
//! goes to the oldest, and the watch wakes it when the Lease is released.
//!
//! An Apply that follows its own Plan at once (no decision to wait for)
//! keeps the Plan's place: the Plan's release puts it first, and the Lease
//! waits [`FOLLOWS_GRACE`] for it. It went to the end before, behind its
//! database's interval reads: an edit of 100 of 1,000 schemas waited 838 s
//! (p50) between a Plan and its Apply at `8671f15`.
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

/// A waiter that has not asked for this long no longer waits: six of the
/// lifecycle's 30 s retries, and the wait for a turn, even when a thousand
/// resources take turns (up to a minute). Longer costs little: a waiter
/// that stopped is passed over [`WOKEN_GRACE`] after it is woken.
pub const STOPPED_ASKING: Duration = Duration::from_secs(180);
/// A waiter woken to take its free Lease that has not asked since, this
/// long after, is not coming: a woken pass goes before every turn, and
/// asked within 7 s under 1,000 schemas (p90 2.2 s).
pub const WOKEN_GRACE: Duration = Duration::from_secs(15);
/// How long a Lease released by a Plan waits for the Apply that follows
/// it: its next pass claims the Apply and asks at once, and goes before
/// any turn; a minute is the turns' worst wait at 1,000 schemas and more.
pub const FOLLOWS_GRACE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct Waiter {
    /// The operation; for one that `follows`, the Plan it follows.
    operation_id: String,
    who: Addressee,
    asked: Instant,
    /// When the watch last woke it to take the free Lease.
    woken: Option<Instant>,
    /// The Apply that follows the Plan `operation_id` of `who`, not yet
    /// claimed: its pass comes by itself, and it is never woken.
    follows: bool,
}

impl Waiter {
    /// Whether it is `operation_id` of `who`: the operation, or the Apply
    /// `who` claims after the Plan it follows.
    fn is(&self, operation_id: &str, who: &Addressee) -> bool {
        self.operation_id == operation_id || (self.follows && self.who == *who)
    }

    /// Woken and not yet come.
    fn woken_since_asked(&self) -> bool {
        self.woken.is_some_and(|w| self.asked < w)
    }

    /// Wakes it, unless a wake it has not answered is under way; whom to
    /// wake.
    fn wake(&mut self, now: Instant) -> Option<Addressee> {
        if self.follows || self.woken_since_asked() {
            return None;
        }
        self.woken = Some(now);
        Some(self.who.clone())
    }

    fn still_waits(&self, now: Instant) -> bool {
        let gone = |since: Instant, grace| now.saturating_duration_since(since) >= grace;
        if self.follows {
            return !gone(self.asked, FOLLOWS_GRACE);
        }
        let not_coming = self
            .woken
            .is_some_and(|w| self.asked < w && gone(w, WOKEN_GRACE));
        !gone(self.asked, STOPPED_ASKING) && !not_coming
    }
}

/// Who a Lease is kept for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ahead {
    /// The operation; for an Apply kept a place, the Plan it follows.
    pub operation_id: String,
    /// An Apply kept a place after its own Plan.
    pub follows: bool,
}

impl std::fmt::Display for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.follows {
            write!(
                f,
                "the apply that follows plan operation {}",
                self.operation_id
            )
        } else {
            write!(
                f,
                "operation {}, which has waited longer",
                self.operation_id
            )
        }
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

    /// Who is ahead of `operation_id` of `who` at the free `lease` at
    /// `now` (an operation, or the Apply that follows a Plan), and whom to
    /// wake to take it (the oldest waiter, unless a wake it has not answered
    /// is under way: a waiter that asked before the Lease was freed learns
    /// so here); `None` when it is first or nobody waits.
    pub fn ahead(
        &mut self,
        lease: &str,
        operation_id: &str,
        who: &Addressee,
        now: Instant,
    ) -> Option<(Ahead, Option<Addressee>)> {
        let first = self.first(lease, now)?;
        if first.is(operation_id, who) {
            return None;
        }
        let wake = first.wake(now);
        let ahead = Ahead {
            operation_id: first.operation_id.clone(),
            follows: first.follows,
        };
        Some((ahead, wake))
    }

    /// `operation_id` of `who` was told to wait for `lease` at `now`: it
    /// joins the end, or keeps its place (an Apply the place kept for it)
    /// and is marked as still asking.
    pub fn wait(&mut self, lease: &str, operation_id: &str, who: &Addressee, now: Instant) {
        let waiters = self.leases.entry(lease.to_owned()).or_default();
        match waiters.iter_mut().find(|w| w.is(operation_id, who)) {
            Some(w) => {
                w.operation_id = operation_id.to_owned();
                w.follows = false;
                w.asked = now;
            }
            None => waiters.push_back(Waiter {
                operation_id: operation_id.to_owned(),
                who: who.clone(),
                asked: now,
                woken: None,
                follows: false,
            }),
        }
    }

    /// The Plan `operation_id` of `who` releases `lease` at `now`, and its
    /// Apply follows at once: the Apply goes first.
    pub fn follows(&mut self, lease: &str, operation_id: &str, who: &Addressee, now: Instant) {
        let waiters = self.leases.entry(lease.to_owned()).or_default();
        waiters.retain(|w| w.who != *who);
        waiters.push_front(Waiter {
            operation_id: operation_id.to_owned(),
            who: who.clone(),
            asked: now,
            woken: None,
            follows: true,
        });
    }

    /// `operation_id` of `who` holds `lease` (or, for the Apply kept a
    /// place, no longer comes): it waits no more.
    pub fn took(&mut self, lease: &str, operation_id: &str, who: &Addressee) {
        if let Some(waiters) = self.leases.get_mut(lease) {
            waiters.retain(|w| !w.is(operation_id, who));
            if waiters.is_empty() {
                self.leases.remove(lease);
            }
        }
    }

    /// Whom to wake now that `lease` is free: its oldest waiter still
    /// asking at `now`, which has [`WOKEN_GRACE`] to come; `None` as well
    /// when a wake it has not answered is under way, or the first is an
    /// Apply kept a place (it comes by itself).
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

    /// `op-x` is an operation of `x`.
    fn of(op: &str) -> Addressee {
        who(op.trim_start_matches("op-"))
    }

    /// The operation ahead of `op` at the free Lease, if any.
    fn ahead(q: &mut Queue, lease: &str, op: &str, now: Instant) -> Option<String> {
        q.ahead(lease, op, &of(op), now)
            .map(|(first, _)| first.operation_id)
    }

    fn operation(id: &str) -> Ahead {
        Ahead {
            operation_id: id.into(),
            follows: false,
        }
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
        q.took("realm", "op-b", &of("op-b"));
        assert_eq!(ahead(&mut q, "realm", "op-new", t).as_deref(), Some("op-c"));
        q.took("realm", "op-c", &of("op-c"));
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
            q.ahead("realm", "op-c", &who("c"), t + s(1)),
            Some((operation("op-b"), None))
        );
        assert_eq!(q.next("realm", t + s(1)), None);
        // Two asks and the Lease is taken by another manager meanwhile:
        // when it is free again, two is woken again, by the watch or by
        // whoever finds it free first.
        q.wait("realm", "op-b", &who("b"), t + s(2));
        assert_eq!(
            q.ahead("realm", "op-c", &who("c"), t + s(3)),
            Some((operation("op-b"), Some(who("b"))))
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
    fn an_apply_that_follows_its_own_plan_keeps_the_plans_place() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-c", &who("c"), t);
        q.wait("realm", "op-d", &who("d"), t + s(1));
        // b's Plan releases the Lease and its Apply follows: b goes first,
        // and the watch wakes nobody for it (b's own pass comes).
        q.follows("realm", "plan-b", &who("b"), t + s(2));
        assert_eq!(q.next("realm", t + s(2)), None);
        let kept = q.ahead("realm", "op-c", &who("c"), t + s(3));
        let follows = Ahead {
            operation_id: "plan-b".into(),
            follows: true,
        };
        assert_eq!(kept, Some((follows.clone(), None)));
        assert_eq!(
            follows.to_string(),
            "the apply that follows plan operation plan-b"
        );
        // b's Apply, a new operation, is let through and takes it.
        assert_eq!(q.ahead("realm", "apply-b", &who("b"), t + s(3)), None);
        q.took("realm", "apply-b", &who("b"));
        assert_eq!(
            ahead(&mut q, "realm", "op-d", t + s(4)).as_deref(),
            Some("op-c")
        );
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn an_apply_kept_a_place_that_finds_the_lease_taken_waits_first() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-c", &who("c"), t);
        q.follows("realm", "plan-b", &who("b"), t + s(1));
        // Another manager took the Lease meanwhile: b's Apply waits, first.
        q.wait("realm", "apply-b", &who("b"), t + s(2));
        // An ordinary waiter now: woken when the Lease is found free.
        assert_eq!(
            q.ahead("realm", "op-c", &who("c"), t + s(3)),
            Some((operation("apply-b"), Some(who("b"))))
        );
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn an_apply_kept_a_place_that_does_not_come_gives_it_up() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm", "op-c", &who("c"), t);
        q.follows("realm", "plan-b", &who("b"), t);
        let within = t + FOLLOWS_GRACE - s(1);
        q.wait("realm", "op-c", &who("c"), within);
        assert_eq!(
            ahead(&mut q, "realm", "op-c", within).as_deref(),
            Some("plan-b")
        );
        // b was suspended, say: after the grace c goes.
        assert_eq!(ahead(&mut q, "realm", "op-c", t + FOLLOWS_GRACE), None);
        assert_eq!(q.next("realm", t + FOLLOWS_GRACE), Some(who("c")));
    }

    #[test]
    fn each_lease_has_its_own_queue() {
        let (mut q, t) = (Queue::default(), Instant::now());
        q.wait("realm-1", "op-b", &who("b"), t);
        assert_eq!(ahead(&mut q, "realm-2", "op-c", t), None);
        assert_eq!(q.next("realm-2", t), None);
        q.took("realm-2", "op-b", &of("op-b"));
        assert_eq!(ahead(&mut q, "realm-1", "op-c", t).as_deref(), Some("op-b"));
        q.took("realm-1", "op-b", &of("op-b"));
        assert_eq!(q.len(), 0);
    }
}
