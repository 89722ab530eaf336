//! What the manager last knew of objects, each at the resourceVersion it
//! knew it at: the version of each resource it last read or wrote (a store
//! copy at another version may trail its own write), and what a source
//! ConfigMap's selected keys gave. Losing it costs one read.

use std::collections::HashMap;
use std::sync::Mutex;

/// Values by object key, each recorded at a resourceVersion.
#[derive(Debug)]
pub struct ByVersion<T>(Mutex<HashMap<String, (String, T)>>);

impl<T> Default for ByVersion<T> {
    fn default() -> Self {
        ByVersion(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> ByVersion<T> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, T)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The version `key` was recorded at.
    pub fn version(&self, key: &str) -> Option<String> {
        self.map().get(key).map(|(v, _)| v.clone())
    }

    /// The value of `key`, if it was recorded at `version`.
    pub fn at(&self, key: &str, version: &str) -> Option<T> {
        self.map()
            .get(key)
            .filter(|(v, _)| v == version)
            .map(|(_, t)| t.clone())
    }

    /// Records `value` of `key` at `version`.
    pub fn put(&self, key: &str, version: &str, value: T) {
        self.map()
            .insert(key.to_string(), (version.to_string(), value));
    }

    /// Forgets `key` (the object is gone).
    pub fn forget(&self, key: &str) {
        self.map().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_known_only_at_the_version_it_was_recorded_at() {
        let m = ByVersion::default();
        m.put("a", "7", 1);
        assert_eq!(m.at("a", "7"), Some(1));
        assert_eq!(m.at("a", "8"), None);
        assert_eq!(m.version("a").as_deref(), Some("7"));
        m.forget("a");
        assert_eq!(m.version("a"), None);
    }
}
