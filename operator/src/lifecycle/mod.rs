//! Stages 2–6 as pure state machines: given a resource, its claim and what
//! was observed (a Job's end, a result, a Lease, an approval, a source change,
//! the clock), each returns the next status and the effects to perform. No
//! I/O here; every arrow of the seed's diagrams is a named unit test.

pub mod common;
// Condition lists are edited the same way by every layer.
pub use crate::api::conditions;
pub mod journal;
pub mod migration;
pub mod preview;
pub mod read_request;
pub mod realm;
pub mod schema;
#[cfg(test)]
mod test_support;
