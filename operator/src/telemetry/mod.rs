//! Traces and metrics: the I/O around the pure trace of a change
//! (`change.rs`). Everything here is off unless the environment turns it on,
//! and nothing here can fail a pass.

pub mod change;
pub mod export;
pub mod metrics;
pub mod runner;
