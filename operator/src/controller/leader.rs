//! Leader election of the manager's replicas on one coordination Lease,
//! through `kube-lease-manager`: every replica serves the receiver and the
//! webhooks, and only the one holding the Lease reconciles. Claims, realm
//! Leases and fencing already make two reconcilers safe; the election makes
//! them rare, so a second replica is a warm standby rather than a rival.

use std::future::Future;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use sha2::Digest as _;

/// Which Lease the replicas elect their leader on, and for how long a
/// leader that stopped renewing keeps it.
#[derive(Clone, Debug)]
pub struct Election {
    /// The Lease's name.
    pub lease: String,
    /// Its namespace.
    pub namespace: String,
    /// This replica's identity on it.
    pub identity: String,
    /// Seconds a leader holds the Lease without renewing.
    pub duration_seconds: u64,
}

/// Why leading ended.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    /// The Lease could not be created or read.
    #[error("leader election on Lease {namespace}/{lease}: {source}")]
    Lease {
        /// Namespace of the Lease.
        namespace: String,
        /// Its name.
        lease: String,
        /// Why.
        source: kube_lease_manager::LeaseManagerError,
    },
    /// Another replica holds the Lease now: this one stops reconciling, and
    /// its restart makes it a standby again.
    #[error("lost the leader Lease {namespace}/{lease}; stopping so another replica leads")]
    Leadership {
        /// Namespace of the Lease.
        namespace: String,
        /// Its name.
        lease: String,
    },
}

/// The field manager a replica takes the Lease under: its own. The Lease is
/// taken by a server-side apply of `holderIdentity`, and an apply conflicts
/// only with another manager's fields: under one shared name, two replicas
/// that both saw the Lease free both took it, both led until the earlier
/// one's next renewal, and that one then stopped (a restart in the chart's
/// Deployment). Field managers are at most 128 characters: a longer one
/// keeps a digest of the whole identity, since replicas' names differ at
/// their end.
fn field_manager(identity: &str) -> String {
    let name = format!("ptah-operator/{identity}");
    if name.len() <= 128 {
        return name;
    }
    let digest = hex::encode(&sha2::Sha256::digest(identity.as_bytes())[..8]);
    let mut end = 128 - 17;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}~{digest}", &name[..end])
}

/// Waits until this replica holds the Lease, then runs `work` for as long
/// as it does. Returns when `work` ends; an error when leadership is lost
/// (then `work` is dropped, as a crash would stop it: the claims are written
/// for that) or the Lease cannot be managed. `shutdown` ending releases the
/// Lease at once, so the standby need not wait for it to expire.
pub async fn lead<W, S>(
    client: Client,
    election: &Election,
    work: W,
    shutdown: S,
) -> Result<(), Lost>
where
    W: Future<Output = ()>,
    S: Future<Output = ()>,
{
    let lease_err = |source| Lost::Lease {
        namespace: election.namespace.clone(),
        lease: election.lease.clone(),
        source,
    };
    // Renew a third of the duration before it ends: two missed renewals
    // still keep it.
    let grace = (election.duration_seconds / 3).max(1);
    let manager = LeaseManagerBuilder::new(client, &election.lease)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(election.duration_seconds)
        .with_grace(grace)
        .with_field_manager(field_manager(&election.identity))
        .build()
        .await
        .map_err(lease_err)?;
    let (mut leading, task) = manager.watch().await;
    tracing::info!(
        lease = %format!("{}/{}", election.namespace, election.lease),
        identity = %election.identity,
        "standing for leader"
    );
    tokio::pin!(shutdown);
    let ended = async {
        while !*leading.borrow_and_update() {
            if leading.changed().await.is_err() {
                return Err(Lost::Leadership {
                    namespace: election.namespace.clone(),
                    lease: election.lease.clone(),
                });
            }
        }
        tracing::info!(identity = %election.identity, "leading: reconciling");
        let lost = async {
            loop {
                if leading.changed().await.is_err() || !*leading.borrow_and_update() {
                    return;
                }
            }
        };
        tokio::select! {
            () = work => Ok(()),
            () = lost => Err(Lost::Leadership {
                namespace: election.namespace.clone(),
                lease: election.lease.clone(),
            }),
        }
    };
    let result = tokio::select! {
        r = ended => r,
        () = &mut shutdown => Ok(()),
    };
    // Closing the channel makes the watcher release the Lease if it holds it.
    drop(leading);
    match task.await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader Lease"),
        Err(e) => tracing::warn!(error = %e, "the leader election task"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_replica_takes_the_lease_under_its_own_field_manager() {
        assert_eq!(field_manager("pod-a"), "ptah-operator/pod-a");
        assert_ne!(field_manager("pod-a"), field_manager("pod-b"));
        let long = "é".repeat(100);
        let name = field_manager(&long);
        assert!(name.len() <= 128, "{} bytes", name.len());
        assert!(name.starts_with("ptah-operator/é"));
        let (a, b) = (format!("{long}-a"), format!("{long}-b"));
        assert_ne!(field_manager(&a), field_manager(&b));
    }
}
