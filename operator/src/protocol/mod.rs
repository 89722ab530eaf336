//! The wire contract between the runner and the manager, which both import
//! and neither owns: what the Job builder writes on the runner's command
//! line and the runner parses ([`args`]), the one result document a step
//! delivers and the termination-message summary beside it ([`result`]),
//! what the database operations ([`database`]) and the migration operations
//! ([`migrations`]) answer, and how the result receiver is reached
//! ([`receiver`]: paths, headers, digests, answers).
//!
//! Types and pure functions only, with their serde attributes: the JSON is
//! the contract, byte for byte. This module imports [`crate::api`] and
//! external crates, never the runner, the execution layer, the lifecycles or
//! the controller; both ends import it instead of each other.

pub mod args;
pub mod database;
pub mod migrations;
pub mod naming;
pub mod receiver;
pub mod result;
