//! Stage 1, Source: resolving and verifying what a resource's `spec.source`
//! names — ConfigMap snapshots, Git commits, OCI digests under sigstore
//! policies — and the content digests that plan contract v2 binds into every
//! plan. The manager uses it for ConfigMap snapshots; `ptah-runner` uses it in
//! Resolve, Verify and the source init containers.
//!
//! It knows nothing of Kubernetes: the operator maps its API types onto the
//! plain inputs here, so every step is testable against real servers alone.

pub mod contract;
pub mod flux;
pub mod git;
pub mod manifest;
pub mod oci;
pub mod snapshot;
pub mod source_policy;
pub mod verification;

use sha2::{Digest, Sha256};

/// `sha256:<hex>` of some bytes: the form every digest in status takes.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_of_empty_input_is_the_well_known_value() {
        assert_eq!(
            sha256_digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
