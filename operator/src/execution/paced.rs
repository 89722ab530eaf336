//! When the manager last asked the API server about an object its watch
//! store may hold stale: a store that trails its watch (a subscriber behind,
//! a watch reconnecting) is checked by a read, but at most once per
//! interval per object, however often passes look at it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When each object was last read from the API server rather than a store.
#[derive(Debug)]
pub struct Paced {
    every: Duration,
    last: Mutex<HashMap<String, Instant>>,
}

/// Past this many objects, those not read within the interval are dropped.
const PRUNE_AT: usize = 4096;

impl Paced {
    /// Reads at most once per `every` per object.
    pub fn every(every: Duration) -> Self {
        Paced {
            every,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `key` is due a read now; if so, the read counts as made.
    pub fn due(&self, key: &str) -> bool {
        self.due_at(key, Instant::now())
    }

    fn due_at(&self, key: &str, now: Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last
            .get(key)
            .is_some_and(|at| now.saturating_duration_since(*at) < self.every)
        {
            return false;
        }
        if last.len() >= PRUNE_AT {
            last.retain(|_, at| now.saturating_duration_since(*at) < self.every);
        }
        last.insert(key.to_owned(), now);
        true
    }

    /// Forgets `key` (it ended, or is gone): its next look is a read.
    pub fn forget(&self, key: &str) {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_read_once_per_interval_and_again_once_forgotten() {
        let p = Paced::every(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(p.due_at("a", t0));
        assert!(!p.due_at("a", t0 + Duration::from_secs(59)));
        assert!(p.due_at("b", t0 + Duration::from_secs(59)), "per object");
        assert!(p.due_at("a", t0 + Duration::from_secs(60)));
        assert!(!p.due_at("a", t0 + Duration::from_secs(61)));
        p.forget("a");
        assert!(p.due_at("a", t0 + Duration::from_secs(62)));
    }

    #[test]
    fn a_full_table_drops_objects_not_read_within_the_interval() {
        let p = Paced::every(Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..PRUNE_AT {
            assert!(p.due_at(&i.to_string(), t0));
        }
        assert!(p.due_at("new", t0 + Duration::from_secs(120)));
        assert_eq!(p.last.lock().unwrap().len(), 1);
    }
}
