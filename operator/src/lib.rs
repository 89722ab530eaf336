//! The Ptah operator. The manager (`ptah-operator`) owns stages 1–6 on the
//! Kubernetes side: it pins sources, publishes plans, decides by policy,
//! dispatches Jobs and records history. The runner (`ptah-runner`) is PID 1 of
//! every operation container: it performs one operation through the Ptah CLI
//! and delivers one result.
//!
//! [`api`] holds every resource kind as Rust types (`crdgen` generates the
//! CRDs and `docs/api.md` from them); [`protocol`] the wire contract between
//! the runner and the manager (the command line the Job builder writes and
//! the runner parses, result documents, the receiver's paths and headers),
//! which both import instead of each other; [`lifecycle`] the two pure state
//! machines; [`execution`] the Jobs, Leases, results, snapshots and plans;
//! [`controller`] the wiring; [`admission`] the approval webhooks; [`server`]
//! the manager's TLS listener; [`runner`] the in-Job program, which takes
//! nothing of the manager's: of this crate it imports [`api`] and
//! [`protocol`] only (its tests borrow [`server`] to stand up a receiver).

pub mod admission;
pub mod api;
pub mod controller;
pub mod execution;
pub mod lifecycle;
pub mod protocol;
pub mod runner;
pub mod server;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;

/// The version every binary of the operator reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
