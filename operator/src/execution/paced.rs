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
        self.due_at(key, self.every, Instant::now())
    }

    /// [`Paced::due`] with `every` for this object (never below the table's
    /// own interval): an object read less often as it ages.
    pub fn due_after(&self, key: &str, every: Duration) -> bool {
        self.due_at(key, every, Instant::now())
    }

    /// Counts a read of `key` as made now: an answer of the API server as
    /// good as a read (the object as created).
    pub fn mark(&self, key: &str) {
        self.mark_at(key, Instant::now());
    }

    /// Whether `key` was read (or marked) within the interval.
    pub fn recent(&self, key: &str) -> bool {
        self.recent_at(key, Instant::now())
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recent_at(&self, key: &str, now: Instant) -> bool {
        Self::within(&self.table(), key, self.every, now)
    }

    fn within(last: &HashMap<String, Instant>, key: &str, every: Duration, now: Instant) -> bool {
        last.get(key)
            .is_some_and(|at| now.saturating_duration_since(*at) < every)
    }

    fn mark_at(&self, key: &str, now: Instant) {
        self.insert(&mut self.table(), key, now);
    }

    fn insert(&self, last: &mut HashMap<String, Instant>, key: &str, now: Instant) {
        if last.len() >= PRUNE_AT {
            last.retain(|_, at| now.saturating_duration_since(*at) < self.every);
        }
        last.insert(key.to_owned(), now);
    }

    fn due_at(&self, key: &str, every: Duration, now: Instant) -> bool {
        let mut last = self.table();
        if Self::within(&last, key, every.max(self.every), now) {
            return false;
        }
        self.insert(&mut last, key, now);
        true
    }

    /// Forgets `key` (it ended, or is gone): its next look is a read.
    pub fn forget(&self, key: &str) {
        self.table().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Paced {
        fn due_at_every(&self, key: &str, now: Instant) -> bool {
            self.due_at(key, self.every, now)
        }
    }

    #[test]
    fn an_object_is_read_once_per_interval_and_again_once_forgotten() {
        let p = Paced::every(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(p.due_at_every("a", t0));
        assert!(!p.due_at_every("a", t0 + Duration::from_secs(59)));
        assert!(
            p.due_at_every("b", t0 + Duration::from_secs(59)),
            "per object"
        );
        assert!(p.due_at_every("a", t0 + Duration::from_secs(60)));
        assert!(!p.due_at_every("a", t0 + Duration::from_secs(61)));
        p.forget("a");
        assert!(p.due_at_every("a", t0 + Duration::from_secs(62)));
    }

    #[test]
    fn a_full_table_drops_objects_not_read_within_the_interval() {
        let p = Paced::every(Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..PRUNE_AT {
            assert!(p.due_at_every(&i.to_string(), t0));
        }
        assert!(p.due_at_every("new", t0 + Duration::from_secs(120)));
        assert_eq!(p.last.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_mark_counts_as_a_read_and_is_recent_for_the_interval() {
        let p = Paced::every(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(!p.recent_at("job", t0), "nothing read yet");
        p.mark_at("job", t0);
        assert!(p.recent_at("job", t0 + Duration::from_secs(59)));
        assert!(!p.due_at_every("job", t0 + Duration::from_secs(59)));
        assert!(!p.recent_at("job", t0 + Duration::from_secs(60)));
        assert!(p.due_at_every("job", t0 + Duration::from_secs(60)));
    }

    #[test]
    fn a_longer_interval_of_one_object_spaces_its_reads_and_a_shorter_one_is_raised() {
        let p = Paced::every(Duration::from_secs(60));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(p.due_at("job", Duration::from_secs(120), at(0)));
        assert!(!p.due_at("job", Duration::from_secs(120), at(119)));
        assert!(p.due_at("job", Duration::from_secs(120), at(120)));
        assert!(
            !p.due_at("job", Duration::from_secs(1), at(179)),
            "never below the table's own"
        );
        assert!(p.due_after("other", Duration::ZERO));
    }
}
