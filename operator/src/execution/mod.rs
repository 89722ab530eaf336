//! Stage 4's effects: the Job builder (one deterministic, hardened Pod per
//! operation), and later the claim and dispatch protocol, realm Leases, the
//! result receiver and harvest, plan storage and the journal writer.

#[cfg(feature = "testing")]
pub mod examples;
pub mod job;
pub mod lease;
pub mod migration_plan;
pub mod paced;
pub mod plan;
pub mod preview;
pub mod receiver;
pub mod snapshot;
pub mod source_policy;
