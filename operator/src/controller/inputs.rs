//! What a schema names outside itself, read for a pass: the ConfigMaps of its
//! source and policies, and the bindings status records for them.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use supplychain::source_policy::{SourcePolicy, policy_digest};

use crate::api::common::ConfigMapKeyRef;
use crate::api::source::PolicyBinding;
use crate::api::source::Source;

/// Whether a source names the ConfigMap `name` (its namespace's): the source,
/// the source policy or the verification policy. A watch event on it wakes
/// the schema, so an edit is read at once.
pub fn names_config_map(src: &Source, name: &str) -> bool {
    src.config_map.as_ref().is_some_and(|c| c.name == name)
        || src
            .source_policy_from
            .as_ref()
            .is_some_and(|p| p.name == name)
        || src
            .verification_policy_from
            .as_ref()
            .is_some_and(|p| p.name == name)
}

/// Why a policy ConfigMap key could not be read; names the ConfigMap and key.
#[derive(Debug, thiserror::Error)]
pub enum PolicyReadError {
    /// Absent.
    #[error("policy ConfigMap {name} not found")]
    Missing {
        /// Its name.
        name: String,
    },
    /// The key is absent.
    #[error("policy ConfigMap {name}: key {key:?} not found")]
    KeyMissing {
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
    /// The API server could not be asked.
    #[error("reading policy ConfigMap {name}: {source}")]
    Api {
        /// Its name.
        name: String,
        /// The error.
        #[source]
        source: Box<kube::Error>,
    },
}

/// Reads a policy ConfigMap key: its binding (name, key, UID, digest of the
/// exact bytes) and the bytes.
pub async fn policy(
    client: &Client,
    namespace: &str,
    key_ref: &ConfigMapKeyRef,
) -> Result<(PolicyBinding, Vec<u8>), PolicyReadError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(&key_ref.name)
        .await
        .map_err(|e| PolicyReadError::Api {
            name: key_ref.name.clone(),
            source: Box::new(e),
        })?
        .ok_or_else(|| PolicyReadError::Missing {
            name: key_ref.name.clone(),
        })?;
    let bytes = cm
        .data
        .as_ref()
        .and_then(|d| d.get(&key_ref.key))
        .map(|s| s.as_bytes().to_vec())
        .or_else(|| {
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(&key_ref.key))
                .map(|b| b.0.clone())
        })
        .ok_or_else(|| PolicyReadError::KeyMissing {
            name: key_ref.name.clone(),
            key: key_ref.key.clone(),
        })?;
    let binding = PolicyBinding {
        name: key_ref.name.clone(),
        key: key_ref.key.clone(),
        uid: cm.metadata.uid.clone().unwrap_or_default(),
        digest: policy_digest(&bytes),
    };
    Ok((binding, bytes))
}

/// The Git host rule of a source policy, checked in the manager before a
/// Resolve Job is made: `Err` names the rule.
pub fn check_git_host(policy_bytes: &[u8], url: &str) -> Result<(), String> {
    let policy = SourcePolicy::parse(policy_bytes).map_err(|e| format!("source policy: {e}"))?;
    crate::execution::source_policy::check_git_host(&policy, url).map_err(|r| r.to_string())
}

/// Whether the recorded binding still describes the ConfigMap key: same
/// object (UID) and same bytes (digest).
pub fn same_policy(recorded: Option<&PolicyBinding>, current: Option<&PolicyBinding>) -> bool {
    match (recorded, current) {
        (None, None) => true,
        (Some(a), Some(b)) => a.uid == b.uid && a.digest == b.digest,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(uid: &str, digest: &str) -> PolicyBinding {
        PolicyBinding {
            name: "p".into(),
            key: "policy.yaml".into(),
            uid: uid.into(),
            digest: digest.into(),
        }
    }

    #[test]
    fn a_policy_replaced_by_uid_or_bytes_is_not_the_same() {
        let a = binding("u1", "sha256:aa");
        assert!(same_policy(Some(&a), Some(&a.clone())));
        assert!(!same_policy(Some(&a), Some(&binding("u2", "sha256:aa"))));
        assert!(!same_policy(Some(&a), Some(&binding("u1", "sha256:bb"))));
        assert!(!same_policy(Some(&a), None));
        assert!(!same_policy(None, Some(&a)));
        assert!(same_policy(None, None));
    }
}
