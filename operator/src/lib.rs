//! The Ptah operator. The manager (`ptah-operator`) owns stages 1–6 on the
//! Kubernetes side: it pins sources, publishes plans, decides by policy,
//! dispatches Jobs and records history. The runner (`ptah-runner`) is PID 1 of
//! every operation container: it performs one operation through the Ptah CLI
//! and delivers one result. The [`api`] module holds every resource kind as
//! Rust types, from which `crdgen` generates the CRDs and `docs/api.md`; the
//! lifecycles and execution arrive with the issues that follow.

pub mod admission;
pub mod api;
pub mod controller;
pub mod execution;
pub mod lifecycle;
pub mod runner;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;

/// The version every binary of the operator reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
