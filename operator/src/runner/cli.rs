//! The command line, exactly as the Job builder writes it: every value one
//! `--flag=value` argument, the flags and their value types those of
//! [`crate::protocol::args`], which the builder renders from.
//! Every value is checked while parsing; a bad one is refused with the flag
//! named (clap's `invalid value '…' for '--flag'`), exit code
//! [`super::EXIT_USAGE`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use k8s_openapi::jiff::Timestamp;

use crate::api::common::GoDuration;
use crate::api::readiness::Wanted;
use crate::protocol::args::{
    EngineArg, ResourceRef, SourceKindArg, TransactionModeArg, command, flag,
};

/// Runs one Ptah operation inside a Job and delivers its result.
#[derive(Parser, Debug)]
#[command(name = "ptah-runner", version = crate::VERSION)]
pub struct Cli {
    /// Where the summary for the Pod's status is written (the container's
    /// `terminationMessagePath`).
    #[arg(
        long,
        global = true,
        default_value = "/dev/termination-log",
        hide = true
    )]
    pub termination_log: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

/// One step.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The source init container: check a ConfigMap snapshot, or fetch a Git
    /// commit or an OCI artifact, into `--out`.
    #[command(subcommand, name = command::SOURCE)]
    Source(SourceCommand),
    /// Resolve a Git or OCI source to a commit or digest (stage 1).
    #[command(subcommand, name = command::RESOLVE)]
    Resolve(ResolveCommand),
    /// Verify an OCI artifact against its verification policy (stage 1).
    #[command(subcommand, name = command::VERIFY)]
    Verify(VerifyCommand),
    /// Read a schema's drift report from the database (stage 2).
    #[command(name = command::OBSERVE)]
    Observe(DatabaseArgs),
    /// Compute a scoped plan, twice, and dry-run its exact bytes (stage 2).
    #[command(name = command::PLAN)]
    Plan(DatabaseArgs),
    /// Read a migration history (stages 2 and 5).
    #[command(name = command::HISTORY)]
    History(DatabaseArgs),
    /// Apply the exact published plan bytes, or a migration sequence (stage 4).
    #[command(name = command::APPLY)]
    Apply(ApplyArgs),
    /// Ptah's pre-up hook of a migration Apply, under the migration lock:
    /// exit 0 only when Ptah's selection (`PTAH_CURRENT_VERSION`,
    /// `PTAH_TARGET_VERSION`) is the approved sequence. Writes no result.
    #[command(name = command::CHECK_SEQUENCE)]
    CheckSequence(CheckSequenceArgs),
    /// An application's init container: wait until a PtahSchema is InSync
    /// (at a content digest) or a PtahMigration's database is at a version.
    /// Writes no result; exit 0 ready, 2 bad arguments, 4 timed out.
    #[command(name = command::AWAIT)]
    Await(AwaitArgs),
}

impl Command {
    /// The step it runs, as the result document and the runner's span name
    /// it.
    pub fn step(&self) -> &'static str {
        match self {
            Command::Source(SourceCommand::Check(_)) => "source check",
            Command::Source(SourceCommand::Fetch(FetchCommand::Git(_))) => "source fetch git",
            Command::Source(SourceCommand::Fetch(FetchCommand::Oci(_))) => "source fetch oci",
            Command::Resolve(ResolveCommand::Git(_)) => "resolve git",
            Command::Resolve(ResolveCommand::Oci(_)) => "resolve oci",
            Command::Resolve(ResolveCommand::Flux(_)) => "resolve flux",
            Command::Verify(VerifyCommand::Oci(_)) => "verify oci",
            Command::Observe(_) => "observe",
            Command::Plan(_) => "plan",
            Command::History(_) => "history",
            Command::Apply(_) => "apply",
            Command::CheckSequence(_) => "check-sequence",
            Command::Await(_) => "await",
        }
    }
}

/// `ptah-runner await KIND/NAME [--for=…] [--namespace=…] [--timeout=…]`.
#[derive(Args, Debug)]
pub struct AwaitArgs {
    /// `schema/NAME` or `migration/NAME` (also `PtahSchema/NAME`, `PtahMigration/NAME`).
    #[arg(value_parser = parse_await_target)]
    pub target: AwaitTarget,
    /// `InSync`, `version=N` (a migration's database at version N or later)
    /// or `digest=sha256:…` (a schema InSync at that content digest).
    #[arg(long = "for", default_value = "InSync")]
    pub wanted: Wanted,
    /// The resource's namespace (default: the Pod's own).
    #[arg(long, value_parser = parse_text)]
    pub namespace: Option<String>,
    /// Give up after this long, a Go duration such as 10m (default: wait
    /// as long as it takes).
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

/// Which kind `await` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwaitKind {
    Schema,
    Migration,
}

impl AwaitKind {
    /// As `kubectl ptah` spells it.
    pub fn word(self) -> &'static str {
        match self {
            AwaitKind::Schema => "schema",
            AwaitKind::Migration => "migration",
        }
    }
}

/// What `await` reads: a kind and a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwaitTarget {
    pub kind: AwaitKind,
    pub name: String,
}

fn parse_await_target(value: &str) -> Result<AwaitTarget, String> {
    let text = parse_text(value)?;
    let Some((kind, name)) = text.split_once('/') else {
        return Err("must be schema/NAME or migration/NAME".into());
    };
    let kind = match kind {
        "schema" | "PtahSchema" => AwaitKind::Schema,
        "migration" | "PtahMigration" => AwaitKind::Migration,
        _ => return Err(format!("{kind:?} is not schema or migration")),
    };
    // A Kubernetes object name: a DNS subdomain.
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid {
        return Err(format!("{name:?} is not an object name"));
    }
    Ok(AwaitTarget {
        kind,
        name: name.to_string(),
    })
}

/// `ptah-runner check-sequence`.
#[derive(Args, Debug)]
pub struct CheckSequenceArgs {
    /// The approved sequence's digest.
    #[arg(long = flag::SEQUENCE_DIGEST, value_parser = parse_digest)]
    pub sequence_digest: String,
    /// The checked migration directory.
    #[arg(long = flag::SOURCE, value_parser = parse_abs_path)]
    pub source: PathBuf,
}

/// `ptah-runner source …`.
#[derive(Subcommand, Debug)]
pub enum SourceCommand {
    /// Check the mounted ConfigMap snapshot against the bound content digest
    /// and only then copy its files into `--out`.
    #[command(name = command::CHECK)]
    Check(CheckArgs),
    /// Fetch a recorded Git commit or an OCI artifact by digest into `--out`.
    #[command(subcommand, name = command::FETCH)]
    Fetch(FetchCommand),
}

/// `ptah-runner source fetch …`.
#[derive(Subcommand, Debug)]
pub enum FetchCommand {
    /// The recorded commit, checked against the bound content digest.
    #[command(name = command::GIT)]
    Git(FetchGitArgs),
    /// The artifact by digest, every layer checked.
    #[command(name = command::OCI)]
    Oci(FetchOciArgs),
}

/// `ptah-runner resolve …`.
#[derive(Subcommand, Debug)]
pub enum ResolveCommand {
    /// A branch, tag or commit to a commit and content digest.
    #[command(name = command::GIT)]
    Git(ResolveGitArgs),
    /// A tag to a manifest digest.
    #[command(name = command::OCI)]
    Oci(ResolveOciArgs),
    /// A Flux object's artifact to the files at a path, digest checked.
    #[command(name = command::FLUX)]
    Flux(ResolveFluxArgs),
}

/// `ptah-runner verify …`.
#[derive(Subcommand, Debug)]
pub enum VerifyCommand {
    /// An artifact by digest under a verification policy.
    #[command(name = command::OCI)]
    Oci(VerifyOciArgs),
}

/// Bounds every source step takes.
#[derive(Args, Debug, Clone)]
pub struct StepBounds {
    /// The longest the step may take (Go duration). The Pod's
    /// `activeDeadlineSeconds` bounds it too; this one ends the step with a
    /// clear message first.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Also write the result document to this file (it always goes to stdout).
    #[arg(long)]
    pub result_file: Option<PathBuf>,
}

/// `source check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The mounted snapshot ConfigMap.
    #[arg(long = flag::SNAPSHOT, value_parser = parse_abs_path)]
    pub snapshot: PathBuf,
    /// The content digest the operation is bound to.
    #[arg(long = flag::CONTENT_DIGEST, value_parser = parse_digest)]
    pub content_digest: String,
    /// Where the checked files go (the `source` emptyDir).
    #[arg(long = flag::OUT, value_parser = parse_abs_path)]
    pub out: PathBuf,
    #[command(flatten)]
    pub bounds: StepBounds,
}

/// `source fetch git`.
#[derive(Args, Debug)]
pub struct FetchGitArgs {
    /// Repository URL (never with credentials).
    #[arg(long = flag::URL, value_parser = parse_git_url)]
    pub url: String,
    /// The recorded commit (40 lowercase hex).
    #[arg(long = flag::COMMIT, value_parser = parse_commit)]
    pub commit: String,
    /// The ref the source names (`refs/heads/…` or `refs/tags/…`); without
    /// it the commit is fetched by id.
    #[arg(long = flag::REF, value_parser = parse_full_ref)]
    pub git_ref: Option<String>,
    /// Directory or file in the repository.
    #[arg(long = flag::PATH, value_parser = parse_text)]
    pub path: Option<String>,
    /// The content digest the operation is bound to.
    #[arg(long = flag::CONTENT_DIGEST, value_parser = parse_digest)]
    pub content_digest: String,
    /// The mounted Git credentials Secret (keys `username`/`password`,
    /// `bearerToken`, or `identity` with `known_hosts`).
    #[arg(long = flag::CREDENTIALS, value_parser = parse_abs_path)]
    pub credentials: Option<PathBuf>,
    /// Where the fetched files go.
    #[arg(long = flag::OUT, value_parser = parse_abs_path)]
    pub out: PathBuf,
    #[command(flatten)]
    pub bounds: StepBounds,
}

/// Registry transport and credentials, as the Job builder hands them over.
#[derive(Args, Debug, Clone)]
pub struct RegistryArgs {
    /// Talk plain HTTP to the registry (`spec.source.oci.transport.plainHTTP`).
    #[arg(long = flag::PLAIN_HTTP)]
    pub plain_http: bool,
    /// Extra CA certificates (PEM) for the registry.
    #[arg(long = flag::CA_FILE, value_parser = parse_abs_path)]
    pub ca_file: Option<PathBuf>,
    /// A Docker `config.json` with the registry's credentials.
    #[arg(long = flag::DOCKER_CONFIG, value_parser = parse_abs_path)]
    pub docker_config: Option<PathBuf>,
}

/// `source fetch oci`.
#[derive(Args, Debug)]
pub struct FetchOciArgs {
    /// `oci://host/repository@sha256:…`.
    #[arg(long = flag::REFERENCE, value_parser = parse_oci_pinned)]
    pub reference: String,
    /// The artifact kind expected; without it, the kind the manifest declares
    /// (it must be one of Ptah's).
    #[arg(long = flag::ARTIFACT_KIND, value_enum)]
    pub artifact_kind: Option<ArtifactKindArg>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Where the layers go, each under its title.
    #[arg(long = flag::OUT, value_parser = parse_abs_path)]
    pub out: PathBuf,
    #[command(flatten)]
    pub bounds: StepBounds,
}

/// A Ptah artifact kind.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactKindArg {
    /// `application/vnd.stokaro.ptah.schema.v1`.
    Schema,
    /// `application/vnd.stokaro.ptah.migrations.v1`.
    Migrations,
}

/// What every operation container gets.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// `sha256:<64 hex>`.
    #[arg(long = flag::OPERATION_ID, value_parser = parse_digest)]
    pub operation_id: String,
    /// From 1.
    #[arg(long = flag::ATTEMPT, value_parser = clap::value_parser!(i32).range(1..))]
    pub attempt: i32,
    /// `<Kind>/<namespace>/<name>`, Kind `PtahSchema` or `PtahMigration`.
    #[arg(long = flag::RESOURCE, value_parser = parse_resource)]
    pub resource: ResourceRef,
    /// The resource's UID.
    #[arg(long = flag::RESOURCE_UID, value_parser = parse_text)]
    pub resource_uid: String,
    /// The resource generation the operation was dispatched for.
    #[arg(long = flag::GENERATION, value_parser = clap::value_parser!(i64).range(0..))]
    pub generation: i64,
    /// `sha256:<64 hex>`.
    #[arg(long = flag::INPUT_FINGERPRINT, value_parser = parse_digest)]
    pub input_fingerprint: String,
    /// The manager's result receiver (`https://…`).
    #[arg(long = flag::RESULT_URL, value_parser = parse_https_url)]
    pub result_url: String,
    /// The per-operation token for the receiver.
    #[arg(long = flag::RESULT_TOKEN_FILE, value_parser = parse_abs_path)]
    pub result_token_file: PathBuf,
    /// The CA of the receiver's certificate.
    #[arg(long = flag::RESULT_CA_FILE, value_parser = parse_abs_path)]
    pub result_ca_file: Option<PathBuf>,
    /// The runner refuses to start after this instant.
    #[arg(long = flag::DISPATCH_NOT_AFTER, value_parser = parse_time)]
    pub dispatch_not_after: Option<Timestamp>,
    /// The runner stops the operation at this instant.
    #[arg(long = flag::EXECUTION_NOT_AFTER, value_parser = parse_time)]
    pub execution_not_after: Option<Timestamp>,
    #[command(flatten)]
    pub bounds: StepBounds,
}

/// `resolve git`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("git-ref").required(true).multiple(false).args(["branch", "tag", "commit"]))]
pub struct ResolveGitArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Repository URL (never with credentials).
    #[arg(long = flag::URL, value_parser = parse_git_url)]
    pub url: String,
    /// A branch, read at its tip.
    #[arg(long = flag::BRANCH, value_parser = parse_ref_name)]
    pub branch: Option<String>,
    /// A tag.
    #[arg(long = flag::TAG, value_parser = parse_ref_name)]
    pub tag: Option<String>,
    /// A commit by id.
    #[arg(long = flag::COMMIT, value_parser = parse_commit)]
    pub commit: Option<String>,
    /// Directory or file in the repository.
    #[arg(long = flag::PATH, value_parser = parse_text)]
    pub path: Option<String>,
    /// The mounted source policy (`spec.source.sourcePolicyFrom`): the URL
    /// and the commit's selected files are checked against its Git rules
    /// before the commit is reported.
    #[arg(long = flag::SOURCE_POLICY, value_parser = parse_abs_path)]
    pub source_policy: Option<PathBuf>,
    /// The mounted Git credentials Secret.
    #[arg(long = flag::CREDENTIALS, value_parser = parse_abs_path)]
    pub credentials: Option<PathBuf>,
}

/// `resolve oci`.
#[derive(Args, Debug)]
pub struct ResolveOciArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// `oci://host/repository[:tag]`.
    #[arg(long = flag::REFERENCE, value_parser = parse_oci)]
    pub reference: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `resolve flux`: what the manager read from the Flux object's status at
/// dispatch; the step fetches nothing else and echoes the object back.
#[derive(Args, Debug)]
pub struct ResolveFluxArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// `GitRepository` or `OCIRepository`.
    #[arg(long = flag::FLUX_KIND, value_parser = parse_text)]
    pub flux_kind: String,
    /// The object's name.
    #[arg(long = flag::FLUX_NAME, value_parser = parse_text)]
    pub flux_name: String,
    /// The object's UID.
    #[arg(long = flag::FLUX_UID, value_parser = parse_text)]
    pub flux_uid: String,
    /// `status.artifact.url`.
    #[arg(long = flag::URL, value_parser = parse_http_url)]
    pub url: String,
    /// `status.artifact.digest`.
    #[arg(long = flag::ARTIFACT_DIGEST, value_parser = parse_digest)]
    pub artifact_digest: String,
    /// `status.artifact.revision`.
    #[arg(long = flag::REVISION, value_parser = parse_text)]
    pub revision: String,
    /// Directory or file in the artifact.
    #[arg(long = flag::PATH, value_parser = parse_text)]
    pub path: Option<String>,
    /// A verified `OCIRepository`'s manifest, pinned.
    #[arg(long = flag::REFERENCE, value_parser = parse_oci_pinned)]
    pub reference: Option<String>,
}

/// `verify oci`.
#[derive(Args, Debug)]
pub struct VerifyOciArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// `oci://host/repository@sha256:…`.
    #[arg(long = flag::REFERENCE, value_parser = parse_oci_pinned)]
    pub reference: String,
    /// The mounted verification policy.
    #[arg(long = flag::POLICY, value_parser = parse_abs_path)]
    pub policy: PathBuf,
    /// A Flux `OCIRepository`'s artifact: the content digest of the files
    /// source-controller served, which the registry's layer must give.
    #[arg(long = flag::CONTENT_DIGEST, value_parser = parse_digest)]
    pub content_digest: Option<String>,
    /// The path selected in a Flux artifact.
    #[arg(long = flag::PATH, value_parser = parse_text, requires = "content_digest")]
    pub path: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `observe|plan|history`.
#[derive(Args, Debug)]
pub struct DatabaseArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The engine.
    #[arg(long = flag::ENGINE, value_enum)]
    pub engine: EngineArg,
    /// The checked source files (read-only).
    #[arg(long = flag::SOURCE, value_parser = parse_abs_path)]
    pub source: PathBuf,
    /// The source kind.
    #[arg(long = flag::SOURCE_KIND, value_enum)]
    pub source_kind: SourceKindArg,
    /// The content digest the source init container checked.
    #[arg(long = flag::CONTENT_DIGEST, value_parser = parse_digest)]
    pub content_digest: String,
    /// Database connect timeout.
    #[arg(long = flag::CONNECT_TIMEOUT, value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Lock timeout.
    #[arg(long = flag::LOCK_TIMEOUT, value_parser = parse_duration)]
    pub lock_timeout: Duration,
    /// Objects Plan leaves out of its scope (Ptah's `--exclude`), once per
    /// selector; Observe reads without them, as the API says.
    #[arg(long = flag::EXCLUDE)]
    pub exclude: Vec<String>,
    /// The Ptah CLI the runner drives (the executor image's; not written by
    /// the Job builder).
    #[arg(long, default_value = super::executor::PTAH_PATH, value_parser = parse_abs_path, hide = true)]
    pub ptah: PathBuf,
    /// The Job's `work` emptyDir: Ptah's working directory, and where an
    /// Apply's checked plan bytes are written (not written by the Job
    /// builder).
    #[arg(long, default_value = "/work", value_parser = parse_abs_path, hide = true)]
    pub work_dir: PathBuf,
}

/// `apply`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("plan-binding").required(true).multiple(false).args(["plan_content_digest", "sequence_digest"]))]
pub struct ApplyArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// The plan resource.
    #[arg(long = flag::PLAN, value_parser = parse_text)]
    pub plan: String,
    /// Its fingerprint.
    #[arg(long = flag::PLAN_FINGERPRINT, value_parser = parse_digest)]
    pub plan_fingerprint: String,
    /// A schema plan's content digest.
    #[arg(long = flag::PLAN_CONTENT_DIGEST, value_parser = parse_digest)]
    pub plan_content_digest: Option<String>,
    /// A migration plan's sequence digest.
    #[arg(long = flag::SEQUENCE_DIGEST, value_parser = parse_digest)]
    pub sequence_digest: Option<String>,
    /// `all|file|none`.
    #[arg(long = flag::TRANSACTION_MODE, value_enum)]
    pub transaction_mode: Option<TransactionModeArg>,
}

fn parse_text(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.chars().any(char::is_control) {
        return Err("must not hold control characters".into());
    }
    Ok(value.to_string())
}

fn parse_abs_path(value: &str) -> Result<PathBuf, String> {
    let text = parse_text(value)?;
    if !text.starts_with('/') {
        return Err("must be an absolute path".into());
    }
    if text.split('/').any(|c| c == "..") {
        return Err("must not hold `..`".into());
    }
    Ok(PathBuf::from(text))
}

/// `sha256:<64 lowercase hex>`.
pub fn parse_digest(value: &str) -> Result<String, String> {
    match value.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(value.to_string())
        }
        _ => Err("must be sha256: and 64 lowercase hex digits".into()),
    }
}

fn parse_commit(value: &str) -> Result<String, String> {
    if value.len() == 40
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(value.to_string())
    } else {
        Err("must be a full commit id: 40 lowercase hex digits".into())
    }
}

fn parse_ref_name(value: &str) -> Result<String, String> {
    let text = parse_text(value)?;
    if text.starts_with('-')
        || text.contains("..")
        || text.contains(' ')
        || text.ends_with('/')
        || text.ends_with(".lock")
    {
        return Err("is not a valid Git ref name".into());
    }
    Ok(text)
}

fn parse_full_ref(value: &str) -> Result<String, String> {
    let text = parse_ref_name(value)?;
    match text
        .strip_prefix("refs/heads/")
        .or_else(|| text.strip_prefix("refs/tags/"))
    {
        Some(rest) if !rest.is_empty() => Ok(text),
        _ => Err("must be refs/heads/<branch> or refs/tags/<tag>".into()),
    }
}

fn parse_git_url(value: &str) -> Result<String, String> {
    let text = parse_text(value)?;
    let scheme_ok = ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|s| text.starts_with(s));
    if !scheme_ok {
        return Err("must be an https://, http://, ssh://, git:// or file:// URL".into());
    }
    // Credentials belong in the Secret, never in the URL (nor in an error:
    // the value is not echoed back beyond clap's own message).
    let rest = text.split_once("://").map(|(_, r)| r).unwrap_or_default();
    let authority = rest.split('/').next().unwrap_or_default();
    // `ssh://git@host` names a user and is fine; a password, or any
    // userinfo over HTTP (a token), is a credential.
    let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
    let is_ssh = text.starts_with("ssh://");
    if userinfo.is_some_and(|u| !is_ssh || u.contains(':')) {
        return Err("must not carry credentials".into());
    }
    Ok(text)
}

fn parse_oci(value: &str) -> Result<String, String> {
    let text = parse_text(value)?;
    let _: supplychain::oci::OciReference = text.parse().map_err(|e| format!("{e}"))?;
    Ok(text)
}

fn parse_oci_pinned(value: &str) -> Result<String, String> {
    let text = parse_text(value)?;
    let reference: supplychain::oci::OciReference = text.parse().map_err(|e| format!("{e}"))?;
    if reference.digest.is_none() {
        return Err("must be pinned by digest (oci://…@sha256:…)".into());
    }
    Ok(text)
}

/// source-controller serves its artifacts over plain HTTP inside the
/// cluster; a URL with userinfo is refused (nothing here is a credential).
fn parse_http_url(value: &str) -> Result<String, String> {
    let text = parse_text(value)?;
    let rest = ["http://", "https://"]
        .iter()
        .find_map(|s| text.strip_prefix(s))
        .ok_or("must be an http:// or https:// URL")?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err("must name a host and carry no userinfo".into());
    }
    Ok(text)
}

fn parse_https_url(value: &str) -> Result<String, String> {
    let text = parse_text(value)?;
    if !text.starts_with("https://") || text.len() <= "https://".len() {
        return Err("must be an https:// URL".into());
    }
    Ok(text)
}

fn parse_resource(value: &str) -> Result<ResourceRef, String> {
    parse_text(value)?.parse()
}

fn parse_time(value: &str) -> Result<Timestamp, String> {
    value
        .parse::<Timestamp>()
        .map_err(|e| format!("must be an RFC 3339 instant: {e}"))
}

fn parse_duration(value: &str) -> Result<Duration, String> {
    GoDuration::new(value)
        .to_std()
        .map_err(|e| format!("must be a Go duration such as 30s or 10m: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ptah-runner").chain(args.iter().copied()))
    }

    const D: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";

    #[test]
    fn await_parses_a_target_and_what_is_waited_for() {
        let cli = parse(&[
            "await",
            "migration/orders",
            "--for=version=3",
            "--timeout=10m",
        ])
        .unwrap();
        let Command::Await(a) = cli.command else {
            panic!("await");
        };
        assert_eq!(
            a.target,
            AwaitTarget {
                kind: AwaitKind::Migration,
                name: "orders".into()
            }
        );
        assert_eq!(a.wanted, Wanted::Version(3));
        assert_eq!(a.timeout, Some(Duration::from_secs(600)));
        assert_eq!(a.namespace, None);
        let cli = parse(&["await", "PtahSchema/orders", "--namespace=app"]).unwrap();
        let Command::Await(a) = cli.command else {
            panic!("await");
        };
        assert_eq!(
            (a.target.kind, a.wanted),
            (AwaitKind::Schema, Wanted::InSync)
        );
        assert_eq!(a.namespace.as_deref(), Some("app"));
        for (bad, flag) in [
            (vec!["await", "orders"], "<TARGET>"),
            (vec!["await", "job/orders"], "<TARGET>"),
            (vec!["await", "schema/Orders!"], "<TARGET>"),
            (
                vec!["await", "migration/orders", "--for=version=x"],
                "--for",
            ),
            (
                vec!["await", "migration/orders", "--timeout=soon"],
                "--timeout",
            ),
        ] {
            let e = parse(&bad).unwrap_err().to_string();
            assert!(e.contains(flag), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_builders_check_line_parses() {
        let cli = parse(&[
            "source",
            "check",
            "--snapshot=/snapshot",
            &format!("--content-digest={D}"),
            "--out=/source",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Source(SourceCommand::Check(_))
        ));
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_flag() {
        let err = parse(&[
            "source",
            "check",
            "--snapshot=/snapshot",
            "--content-digest=sha256:zz",
            "--out=/source",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--content-digest"), "{err}");
        let err = parse(&[
            "source",
            "fetch",
            "git",
            "--url=https://u:p@git.example/x.git",
            "--commit=0123456789abcdef0123456789abcdef01234567",
            &format!("--content-digest={D}"),
            "--out=/source",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--url"), "{err}");
        assert!(err.contains("must not carry credentials"), "{err}");
    }

    #[test]
    fn resolve_git_takes_exactly_one_ref() {
        let common = [
            format!("--operation-id={D}"),
            "--attempt=1".into(),
            "--resource=PtahSchema/ns/orders".into(),
            "--resource-uid=u".into(),
            "--generation=3".into(),
            format!("--input-fingerprint={D}"),
            "--result-url=https://r.example/v1/results".into(),
            "--result-token-file=/var/run/ptah/result/token".into(),
        ];
        let mut args: Vec<String> = vec!["resolve".into(), "git".into()];
        args.extend(common.iter().cloned());
        args.push("--url=https://git.example/x.git".into());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(parse(&refs).is_err());
        args.push("--branch=main".into());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(parse(&refs).is_ok());
        args.push("--tag=v1".into());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(parse(&refs).is_err());
    }
}
