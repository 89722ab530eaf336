//! The user's side of every stage: the `kubectl ptah` plugin (schema,
//! migration, plan, approve, wait, refresh, set-source, history, trace), the
//! web console (`ptah-console`) and the
//! health rules that let Flux and Argo CD read a PtahSchema or PtahMigration
//! (`gitops/argocd/`).
//!
//! Each verb is a module: it reads what the manager wrote (status, stored
//! plans, the journal) and writes only what a person may write (an approval,
//! the read-request annotation, `spec.source.oci.ref` under its own field
//! manager). The rendering is pure and unit-tested; the cluster calls are
//! thin around it.

pub mod approve;
pub mod cli;
pub mod console;
pub mod follow;
pub mod history;
pub mod output;
pub mod plan;
pub mod preview;
pub mod refresh;
pub mod resource;
pub mod set_source;
pub mod stages;
pub mod trace;

/// The exit codes a script can rely on.
pub mod exit {
    /// The verb did what it was asked.
    pub const OK: i32 = 0;
    /// Something went wrong (the API, a refused write, a missing object).
    pub const ERROR: i32 = 1;
    /// The resource ended `Blocked` or `Failed` while waited for.
    pub const BLOCKED_OR_FAILED: i32 = 2;
    /// The wait timed out.
    pub const TIMEOUT: i32 = 3;
    /// The command line was wrong.
    pub const USAGE: i32 = 64;
    /// What the verb names does not exist.
    pub const NOT_FOUND: i32 = 4;
}

/// A verb's failure: one line for the person, and the exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: i32,
    pub message: String,
    /// The API server's HTTP status, when the failure is its answer.
    pub status: Option<u16>,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            status: None,
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(exit::USAGE, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Failure::new(exit::NOT_FOUND, message)
    }

    pub fn error(message: impl Into<String>) -> Self {
        Failure::new(exit::ERROR, message)
    }

    /// An API error while doing `what`: the server's own message, which
    /// names the object and the rule (admission refusals included).
    pub fn api(what: impl std::fmt::Display, e: kube::Error) -> Self {
        let status = match &e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        };
        let detail = match &e {
            kube::Error::Api(status) => status.message.clone(),
            // A manager newer than this plugin may write a reason or field
            // it does not know.
            kube::Error::SerdeError(err) => format!(
                "the object does not read as this plugin's API (kubectl-ptah {}): {err}; \
                 use the plugin of the manager's version",
                env!("CARGO_PKG_VERSION")
            ),
            other => other.to_string(),
        };
        Failure {
            status,
            ..Failure::error(format!("{what}: {detail}"))
        }
    }
}

/// Objects as the API server returns them, for the verbs' unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::resource::{Kind, Resource};

    /// `app/orders` of `kind`, at `generation`, UID `s1`, with `status`.
    pub fn resource(kind: Kind, generation: i64, status: serde_json::Value) -> Resource {
        let source = match kind {
            Kind::Schema => "orders-schema",
            Kind::Migration => "orders-migrations",
        };
        let obj = serde_json::json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": kind.api_kind(),
            "metadata": {"name": "orders", "namespace": "app", "generation": generation, "uid": "s1"},
            "spec": {
                "target": {"engine": "postgres", "urlFrom": {"name": "db", "key": "url"}},
                "source": {"configMap": {"name": source}},
                "interval": "5m",
            },
            "status": status,
        });
        match kind {
            Kind::Schema => {
                Resource::Schema(Box::new(serde_json::from_value(obj).expect("a PtahSchema")))
            }
            Kind::Migration => Resource::Migration(Box::new(
                serde_json::from_value(obj).expect("a PtahMigration"),
            )),
        }
    }
}
