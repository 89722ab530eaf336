//! The runner's command line as both ends spell it: the Job builder
//! (`execution::job`) renders these typed values, the runner's parser
//! (`runner::cli`) reads the same flags into the same value types. Every
//! value is one `--flag=value` argument ([`arg`]), so a value can never read
//! as a flag, and no shell is involved.
//!
//! An operation container's line is its step's subcommand, then
//! [`OperationFlags`], the step's own flags (for the database operations
//! [`DatabaseFlags`]), [`ResultFlags`], and for an Apply [`PlanFlags`].

use std::fmt;
use std::str::FromStr;

use clap::ValueEnum;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::api::common::{
    DatabaseEngine, GoDuration, MigrationTransactionMode, SchemaTransactionMode,
};
use crate::api::source::SourceKind;

/// The subcommands, as the runner's parser names them.
pub mod command {
    /// The source init container's steps.
    pub const SOURCE: &str = "source";
    /// `source check`: a ConfigMap snapshot.
    pub const CHECK: &str = "check";
    /// `source fetch`.
    pub const FETCH: &str = "fetch";
    /// A Git source (`source fetch git`, `resolve git`).
    pub const GIT: &str = "git";
    /// An OCI source (`source fetch oci`, `resolve oci`, `verify oci`).
    pub const OCI: &str = "oci";
    /// A Flux source's artifact (`resolve flux`).
    pub const FLUX: &str = "flux";
    /// Resolve.
    pub const RESOLVE: &str = "resolve";
    /// Verify.
    pub const VERIFY: &str = "verify";
    /// Observe.
    pub const OBSERVE: &str = "observe";
    /// Plan.
    pub const PLAN: &str = "plan";
    /// History.
    pub const HISTORY: &str = "history";
    /// Apply.
    pub const APPLY: &str = "apply";
    /// Ptah's pre-up hook of a migration Apply.
    pub const CHECK_SEQUENCE: &str = "check-sequence";
    /// An application's init container waiting for a schema or migration.
    pub const AWAIT: &str = "await";
}

/// The flags, without their leading `--`.
pub mod flag {
    /// [`super::OperationFlags::operation_id`].
    pub const OPERATION_ID: &str = "operation-id";
    /// [`super::OperationFlags::attempt`].
    pub const ATTEMPT: &str = "attempt";
    /// [`super::OperationFlags::resource`].
    pub const RESOURCE: &str = "resource";
    /// [`super::OperationFlags::resource_uid`].
    pub const RESOURCE_UID: &str = "resource-uid";
    /// [`super::OperationFlags::generation`].
    pub const GENERATION: &str = "generation";
    /// [`super::OperationFlags::input_fingerprint`].
    pub const INPUT_FINGERPRINT: &str = "input-fingerprint";
    /// [`super::ResultFlags::result_url`].
    pub const RESULT_URL: &str = "result-url";
    /// [`super::ResultFlags::result_token_file`].
    pub const RESULT_TOKEN_FILE: &str = "result-token-file";
    /// [`super::ResultFlags::result_ca_file`].
    pub const RESULT_CA_FILE: &str = "result-ca-file";
    /// [`super::ResultFlags::dispatch_not_after`].
    pub const DISPATCH_NOT_AFTER: &str = "dispatch-not-after";
    /// [`super::ResultFlags::execution_not_after`].
    pub const EXECUTION_NOT_AFTER: &str = "execution-not-after";
    /// [`super::DatabaseFlags::engine`].
    pub const ENGINE: &str = "engine";
    /// [`super::DatabaseFlags::source`]; also `check-sequence`'s directory.
    pub const SOURCE: &str = "source";
    /// [`super::DatabaseFlags::source_kind`].
    pub const SOURCE_KIND: &str = "source-kind";
    /// The bound content digest: [`super::DatabaseFlags::content_digest`],
    /// and `source check` / `source fetch git`.
    pub const CONTENT_DIGEST: &str = "content-digest";
    /// [`super::DatabaseFlags::connect_timeout`].
    pub const CONNECT_TIMEOUT: &str = "connect-timeout";
    /// [`super::DatabaseFlags::lock_timeout`].
    pub const LOCK_TIMEOUT: &str = "lock-timeout";
    /// A schema Plan's `spec.policy.exclude` selector, once per selector.
    pub const EXCLUDE: &str = "exclude";
    /// The plan resource an Apply runs.
    pub const PLAN: &str = "plan";
    /// Its fingerprint.
    pub const PLAN_FINGERPRINT: &str = "plan-fingerprint";
    /// A schema plan's content digest.
    pub const PLAN_CONTENT_DIGEST: &str = "plan-content-digest";
    /// A migration plan's sequence digest; also `check-sequence`'s.
    pub const SEQUENCE_DIGEST: &str = "sequence-digest";
    /// `all|file|none`.
    pub const TRANSACTION_MODE: &str = "transaction-mode";
    /// `source check`: the mounted snapshot.
    pub const SNAPSHOT: &str = "snapshot";
    /// A source step's output directory.
    pub const OUT: &str = "out";
    /// A Git repository.
    pub const URL: &str = "url";
    /// A Git commit.
    pub const COMMIT: &str = "commit";
    /// `source fetch git`: the full ref the source names.
    pub const REF: &str = "ref";
    /// `resolve git`: a branch.
    pub const BRANCH: &str = "branch";
    /// `resolve git`: a tag.
    pub const TAG: &str = "tag";
    /// A directory or file in a Git repository.
    pub const PATH: &str = "path";
    /// The mounted Git credentials.
    pub const CREDENTIALS: &str = "credentials";
    /// `resolve git`: the mounted source policy.
    pub const SOURCE_POLICY: &str = "source-policy";
    /// An OCI reference.
    pub const REFERENCE: &str = "reference";
    /// `verify oci`: the mounted verification policy.
    pub const POLICY: &str = "policy";
    /// Plain HTTP to the registry (a switch).
    pub const PLAIN_HTTP: &str = "plain-http";
    /// The registry's CA.
    pub const CA_FILE: &str = "ca-file";
    /// A Docker `config.json`.
    pub const DOCKER_CONFIG: &str = "docker-config";
    /// `source fetch oci`: the artifact kind expected.
    pub const ARTIFACT_KIND: &str = "artifact-kind";
    /// `resolve flux`: the Flux object's kind.
    pub const FLUX_KIND: &str = "flux-kind";
    /// `resolve flux`: the Flux object's name.
    pub const FLUX_NAME: &str = "flux-name";
    /// `resolve flux`: the Flux object's UID.
    pub const FLUX_UID: &str = "flux-uid";
    /// `resolve flux`: the artifact's SHA-256, as the object's status names it.
    pub const ARTIFACT_DIGEST: &str = "artifact-digest";
    /// `resolve flux`: Flux's revision of the artifact.
    pub const REVISION: &str = "revision";
}

/// One `--flag=value` argument.
pub fn arg(flag: &str, value: impl fmt::Display) -> String {
    format!("--{flag}={value}")
}

/// A switch: `--flag`.
pub fn switch(flag: &str) -> String {
    format!("--{flag}")
}

/// `--resource`: `<Kind>/<namespace>/<name>`, Kind `PtahSchema` or
/// `PtahMigration`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `PtahSchema` or `PtahMigration`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

impl FromStr for ResourceRef {
    type Err = String;

    /// The form only; the runner's parser also refuses empty text and
    /// control characters before it asks.
    fn from_str(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let [kind, namespace, name] = parts.as_slice() else {
            return Err("must be <Kind>/<namespace>/<name>".into());
        };
        if !matches!(*kind, "PtahSchema" | "PtahMigration") {
            return Err("kind must be PtahSchema or PtahMigration".into());
        }
        if namespace.is_empty() || name.is_empty() {
            return Err("namespace and name must not be empty".into());
        }
        Ok(ResourceRef {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

/// `--engine`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineArg {
    /// PostgreSQL.
    Postgresql,
    /// MySQL or MariaDB.
    Mysql,
}

impl EngineArg {
    /// As the flag spells it: [`DatabaseEngine::canonical`].
    pub fn as_str(self) -> &'static str {
        DatabaseEngine::from(self).canonical()
    }
}

impl From<DatabaseEngine> for EngineArg {
    fn from(engine: DatabaseEngine) -> Self {
        match engine {
            DatabaseEngine::PostgreSQL => Self::Postgresql,
            DatabaseEngine::MySQL => Self::Mysql,
        }
    }
}

impl From<EngineArg> for DatabaseEngine {
    fn from(engine: EngineArg) -> Self {
        match engine {
            EngineArg::Postgresql => Self::PostgreSQL,
            EngineArg::Mysql => Self::MySQL,
        }
    }
}

impl fmt::Display for EngineArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--source-kind`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKindArg {
    /// A ConfigMap snapshot.
    #[value(name = "ConfigMap")]
    ConfigMap,
    /// A Git commit.
    #[value(name = "Git")]
    Git,
    /// An OCI artifact.
    #[value(name = "OCI")]
    Oci,
    /// A Flux source's artifact.
    #[value(name = "Flux")]
    Flux,
}

impl SourceKindArg {
    /// As the flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Git => "Git",
            Self::Oci => "OCI",
            Self::Flux => "Flux",
        }
    }
}

impl From<SourceKind> for SourceKindArg {
    fn from(kind: SourceKind) -> Self {
        match kind {
            SourceKind::ConfigMap => Self::ConfigMap,
            SourceKind::Git => Self::Git,
            SourceKind::OCI => Self::Oci,
            SourceKind::Flux => Self::Flux,
        }
    }
}

impl fmt::Display for SourceKindArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--transaction-mode`, handed to Ptah as its `--tx-mode`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionModeArg {
    /// One transaction for everything (schema plans only).
    All,
    /// One transaction per file.
    File,
    /// No transaction.
    None,
}

impl TransactionModeArg {
    /// As the flag (and Ptah) spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::File => "file",
            Self::None => "none",
        }
    }
}

impl From<SchemaTransactionMode> for TransactionModeArg {
    fn from(mode: SchemaTransactionMode) -> Self {
        match mode {
            SchemaTransactionMode::All => Self::All,
            SchemaTransactionMode::File => Self::File,
            SchemaTransactionMode::None => Self::None,
        }
    }
}

impl From<MigrationTransactionMode> for TransactionModeArg {
    fn from(mode: MigrationTransactionMode) -> Self {
        match mode {
            MigrationTransactionMode::File => Self::File,
            MigrationTransactionMode::None => Self::None,
        }
    }
}

impl fmt::Display for TransactionModeArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The claim an operation container carries: the first flags after its
/// subcommand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationFlags {
    /// `sha256:<64 hex>`.
    pub operation_id: String,
    /// From 1.
    pub attempt: i32,
    /// The resource.
    pub resource: ResourceRef,
    /// Its UID.
    pub resource_uid: String,
    /// The generation the operation was dispatched for.
    pub generation: i64,
    /// `sha256:<64 hex>`.
    pub input_fingerprint: String,
}

impl OperationFlags {
    /// The arguments, in their order.
    pub fn render(&self) -> [String; 6] {
        [
            arg(flag::OPERATION_ID, &self.operation_id),
            arg(flag::ATTEMPT, self.attempt),
            arg(flag::RESOURCE, &self.resource),
            arg(flag::RESOURCE_UID, &self.resource_uid),
            arg(flag::GENERATION, self.generation),
            arg(flag::INPUT_FINGERPRINT, &self.input_fingerprint),
        ]
    }
}

/// Where an operation container delivers its result, and the claim's
/// deadlines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultFlags {
    /// The receiver (`https://…`).
    pub result_url: String,
    /// The mounted token.
    pub result_token_file: String,
    /// The mounted CA of the receiver's certificate.
    pub result_ca_file: Option<String>,
    /// The runner refuses to start after this instant.
    pub dispatch_not_after: Option<Timestamp>,
    /// The runner stops the operation at this instant.
    pub execution_not_after: Option<Timestamp>,
}

impl ResultFlags {
    /// The arguments, in their order; instants in RFC 3339 (UTC, `Z`).
    pub fn render(&self) -> Vec<String> {
        let mut out = vec![
            arg(flag::RESULT_URL, &self.result_url),
            arg(flag::RESULT_TOKEN_FILE, &self.result_token_file),
        ];
        out.extend(
            self.result_ca_file
                .as_ref()
                .map(|f| arg(flag::RESULT_CA_FILE, f)),
        );
        out.extend(
            self.dispatch_not_after
                .map(|t| arg(flag::DISPATCH_NOT_AFTER, t)),
        );
        out.extend(
            self.execution_not_after
                .map(|t| arg(flag::EXECUTION_NOT_AFTER, t)),
        );
        out
    }
}

/// What `observe`, `plan`, `history` and `apply` read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseFlags {
    /// The engine.
    pub engine: EngineArg,
    /// The checked source files (read-only).
    pub source: String,
    /// The source kind.
    pub source_kind: SourceKindArg,
    /// The content digest the source init container checked.
    pub content_digest: String,
    /// Database connect timeout.
    pub connect_timeout: GoDuration,
    /// Lock timeout.
    pub lock_timeout: GoDuration,
}

impl DatabaseFlags {
    /// The arguments, in their order.
    pub fn render(&self) -> [String; 6] {
        [
            arg(flag::ENGINE, self.engine),
            arg(flag::SOURCE, &self.source),
            arg(flag::SOURCE_KIND, self.source_kind),
            arg(flag::CONTENT_DIGEST, &self.content_digest),
            arg(flag::CONNECT_TIMEOUT, &self.connect_timeout),
            arg(flag::LOCK_TIMEOUT, &self.lock_timeout),
        ]
    }
}

/// What an `apply` runs: exactly one of a schema plan's bytes or a migration
/// plan's sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanFlags {
    /// A schema plan: the runner fetches its bytes and checks the digest.
    Schema {
        /// The PtahSchemaPlan.
        plan: String,
        /// Its fingerprint.
        plan_fingerprint: String,
        /// SHA-256 of its bytes.
        plan_content_digest: String,
        /// `spec.policy.transactionMode`.
        transaction_mode: TransactionModeArg,
    },
    /// A migration plan: the approved sequence.
    Migration {
        /// The PtahMigrationPlan.
        plan: String,
        /// Its fingerprint.
        plan_fingerprint: String,
        /// The digest of the approved sequence.
        sequence_digest: String,
        /// `spec.policy.transactionMode`, when set.
        transaction_mode: Option<TransactionModeArg>,
    },
}

impl PlanFlags {
    /// The arguments, in their order (the last of the line).
    pub fn render(&self) -> Vec<String> {
        match self {
            Self::Schema {
                plan,
                plan_fingerprint,
                plan_content_digest,
                transaction_mode,
            } => vec![
                arg(flag::PLAN, plan),
                arg(flag::PLAN_FINGERPRINT, plan_fingerprint),
                arg(flag::PLAN_CONTENT_DIGEST, plan_content_digest),
                arg(flag::TRANSACTION_MODE, transaction_mode),
            ],
            Self::Migration {
                plan,
                plan_fingerprint,
                sequence_digest,
                transaction_mode,
            } => {
                let mut out = vec![
                    arg(flag::PLAN, plan),
                    arg(flag::PLAN_FINGERPRINT, plan_fingerprint),
                    arg(flag::SEQUENCE_DIGEST, sequence_digest),
                ];
                out.extend(transaction_mode.map(|m| arg(flag::TRANSACTION_MODE, m)));
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_types_spell_what_their_parser_reads() {
        for e in EngineArg::value_variants() {
            let name = e.to_possible_value().map(|v| v.get_name().to_string());
            assert_eq!(name.as_deref(), Some(e.as_str()));
            assert_eq!(EngineArg::from(DatabaseEngine::from(*e)), *e);
        }
        for k in SourceKindArg::value_variants() {
            let name = k.to_possible_value().map(|v| v.get_name().to_string());
            assert_eq!(name.as_deref(), Some(k.as_str()));
        }
        for m in TransactionModeArg::value_variants() {
            let name = m.to_possible_value().map(|v| v.get_name().to_string());
            assert_eq!(name.as_deref(), Some(m.as_str()));
        }
        // The API's spelling of a source kind is the flag's.
        for k in [
            SourceKind::ConfigMap,
            SourceKind::Git,
            SourceKind::OCI,
            SourceKind::Flux,
        ] {
            let api = serde_json::to_value(k).expect("serialize");
            assert_eq!(api, SourceKindArg::from(k).as_str());
        }
    }

    #[test]
    fn a_resource_renders_as_it_parses() {
        let r = ResourceRef {
            kind: "PtahMigration".into(),
            namespace: "shop".into(),
            name: "orders".into(),
        };
        assert_eq!(r.to_string(), "PtahMigration/shop/orders");
        assert_eq!("PtahMigration/shop/orders".parse(), Ok(r));
        for bad in ["Job/shop/orders", "PtahSchema/shop", "PtahSchema//orders"] {
            assert!(bad.parse::<ResourceRef>().is_err(), "{bad}");
        }
    }
}
