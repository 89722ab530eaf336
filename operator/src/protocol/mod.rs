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

/// `T` from JSON `bytes`, or serde's reason prefixed with the path of the
/// field it is about (`findings[0].count: invalid type: …`): a refusal of
/// outside JSON names the field whatever broke in it.
pub fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes))
        .map_err(|e| e.to_string())
}

/// [`from_json`] of a value already parsed.
pub fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| e.to_string())
}
