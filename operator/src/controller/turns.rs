//! Passes in their turn. kube-runtime bounds a controller's concurrency by
//! holding the surplus in a hash set and starting whichever it finds first
//! there, so a resource that keeps coming back (a claim asking for its
//! database's realm Lease every few seconds) can start again and again
//! while another waits without end: at a cold start of 1,000 schemas, 94
//! had no pass 48 minutes in. So the controller runs unbounded, and each
//! pass waits for a turn that a fair semaphore hands out first come, first
//! served. The pass itself, the large future, is allocated only when its
//! turn comes: a thousand waiting turns cost little memory.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, Semaphore};

/// Turns for `limit` passes at once; `0` is unbounded.
pub fn turns(limit: u16) -> Semaphore {
    Semaphore::new(match limit {
        0 => Semaphore::MAX_PERMITS,
        n => usize::from(n),
    })
}

/// The passes that go before any turn: the oldest waiter for a realm Lease
/// just released, woken to take it. The Lease is kept for it, so every
/// second it waits for a turn its database's Plans and Applies wait too (a
/// p50 of 12–16 s under 1,000 schemas). A pass already waiting for its turn
/// when it is woken stops waiting; one woken before its pass starts goes at
/// once when it does. At most one a released Lease, so they are few.
pub struct Express<K> {
    passes: Mutex<HashMap<K, Arc<Notify>>>,
}

impl<K> Default for Express<K> {
    fn default() -> Self {
        Express {
            passes: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> Express<K> {
    /// `who`'s pass goes before any turn: the one waiting now, or the next.
    pub fn wake(&self, who: &K) {
        self.notify(who).notify_one();
    }

    fn notify(&self, who: &K) -> Arc<Notify> {
        let mut passes = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        passes.entry(who.clone()).or_default().clone()
    }

    /// Runs `who`'s `pass` once a turn is free, in the order turns were
    /// asked for, unless it is woken first (before or while it waits): then
    /// at once.
    pub async fn in_turn<F: Future>(
        &self,
        turns: &Semaphore,
        who: &K,
        pass: impl FnOnce() -> F,
    ) -> F::Output {
        let woken = self.notify(who);
        let asked = std::time::Instant::now();
        let turn = tokio::select! {
            biased;
            () = woken.notified() => None,
            // The semaphore is never closed.
            turn = turns.acquire() => turn.ok(),
        };
        // A wake after this point is for the pass after this one.
        self.passes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(who);
        // The wait for a turn alone (docs/performance.md reads it from this
        // line), apart from how late the pass was due.
        let wait_ms = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(wait_ms, woken = turn.is_none(), "turn");
        let _turn = turn;
        Box::pin(pass()).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A pass nothing wakes.
    async fn in_turn<F: Future>(turns: &Semaphore, pass: impl FnOnce() -> F) -> F::Output {
        Express::<()>::default().in_turn(turns, &(), pass).await
    }

    /// Eight passes asking one after another under `limit` turns: the order
    /// they started in and the most that ran at once.
    async fn eight_passes(limit: u16) -> (Vec<usize>, usize) {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let turns = Arc::new(turns(limit));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (turns, log, running, most) =
                (turns.clone(), log.clone(), running.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                in_turn(&turns, || async move {
                    most.fetch_max(running.fetch_add(1, SeqCst) + 1, SeqCst);
                    log.lock().unwrap().push(i);
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    running.fetch_sub(1, SeqCst);
                })
                .await
            }));
            // Each asks for its turn before the next is spawned.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        let log = log.lock().unwrap().clone();
        (log, most.load(SeqCst))
    }

    #[tokio::test]
    async fn turns_go_first_come_first_served_and_never_beyond_the_limit() {
        assert_eq!(eight_passes(1).await, ((0..8).collect(), 1));
        assert_eq!(eight_passes(2).await.1, 2);
    }

    #[tokio::test]
    async fn one_that_keeps_coming_back_cannot_pass_one_that_waits() {
        let turns = Arc::new(turns(1));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (asked, waiting_asks) = tokio::sync::oneshot::channel::<()>();
        // "again" takes the only turn, lets "waiting" ask, then asks again
        // twice as soon as each turn ends.
        let again = {
            let (turns, log) = (turns.clone(), log.clone());
            tokio::spawn(async move {
                in_turn(&turns, || async {
                    log.lock().unwrap().push("again");
                    let _ = waiting_asks.await;
                })
                .await;
                for _ in 0..2 {
                    in_turn(&turns, || async { log.lock().unwrap().push("again") }).await;
                }
            })
        };
        while turns.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let waiting = {
            let (turns, log) = (turns.clone(), log.clone());
            tokio::spawn(async move {
                in_turn(&turns, || async { log.lock().unwrap().push("waiting") }).await
            })
        };
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        asked.send(()).unwrap();
        again.await.unwrap();
        waiting.await.unwrap();
        assert_eq!(*log.lock().unwrap(), ["again", "waiting", "again", "again"]);
    }

    #[tokio::test]
    async fn a_pass_woken_for_a_released_lease_goes_before_every_turn() {
        let (turns, express) = (Arc::new(turns(1)), Arc::new(Express::<&str>::default()));
        let _held = turns.acquire().await.expect("the only turn");
        let within = |d| std::time::Duration::from_millis(d);

        // Woken before its pass starts: it goes at once.
        express.wake(&"early");
        let ran = tokio::time::timeout(
            within(5000),
            express.in_turn(&turns, &"early", || async { "early" }),
        )
        .await;
        assert_eq!(ran, Ok("early"));
        // Once: its next pass waits for a turn like any other.
        let again =
            tokio::time::timeout(within(50), express.in_turn(&turns, &"early", || async {})).await;
        assert!(again.is_err(), "the wake is spent");

        // Woken while it waits for a turn: it stops waiting.
        let waiting = {
            let (turns, express) = (turns.clone(), express.clone());
            tokio::spawn(async move { express.in_turn(&turns, &"late", || async { "late" }).await })
        };
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "no turn is free");
        express.wake(&"late");
        let ran = tokio::time::timeout(within(5000), waiting).await;
        assert_eq!(ran.expect("woken").expect("ran"), "late");

        // Another's wake does not let it go.
        express.wake(&"other");
        let other = tokio::time::timeout(
            within(50),
            express.in_turn(&turns, &"not woken", || async {}),
        )
        .await;
        assert!(other.is_err(), "any other pass waits for a turn");
    }

    #[test]
    fn zero_is_unbounded() {
        assert_eq!(turns(0).available_permits(), Semaphore::MAX_PERMITS);
        assert_eq!(turns(16).available_permits(), 16);
    }
}
