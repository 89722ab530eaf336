//! The steps themselves: each maps its flags onto supplychain, bounded by its
//! deadline, and answers a [`StepOutput`] or a [`StepError`].

use std::fs;
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use supplychain::manifest::{self, Limits as ManifestLimits, VerifyError};
use supplychain::oci::{ArtifactKind, OciReference, OciSource, Transport};
use supplychain::snapshot::{self, CheckError};
use supplychain::source_policy::{PolicyError, Refusal, SourcePolicy, policy_digest};
use supplychain::verification::{self, CompiledPolicy, VerifyFailure};
use supplychain::{git, oci};

use super::cli::{
    ApplyArgs, ArtifactKindArg, CheckArgs, Command, CommonArgs, DatabaseArgs, FetchCommand,
    FetchGitArgs, FetchOciArgs, RegistryArgs, ResolveCommand, ResolveFluxArgs, ResolveGitArgs,
    ResolveOciArgs, SourceCommand, StepBounds, VerifyCommand, VerifyOciArgs,
};
use super::credentials::{git_credentials, read_optional, registry_credentials};
use super::deliver::{self, Delivered, DeliveryError, FetchedPlan, PlanFetchError, Target};
use super::operations;
use super::{PLAN_FILE, StepError, budget, result_document};
use crate::protocol::receiver::{REASON_PLAN_REFUSED, content_sha256};
use crate::protocol::result::{FileResult, OperationRef, ResultDocument, StepOutput};

/// The largest verification policy read.
const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// A finished step: its document, its exit code and where else the
/// document goes.
#[derive(Debug)]
pub struct Finished {
    /// The result document.
    pub document: ResultDocument,
    /// The process exit code.
    pub exit_code: i32,
    /// `--result-file`, when given.
    pub result_file: Option<PathBuf>,
    /// The delivery to the receiver (operation containers only).
    pub delivery: Option<Result<Delivered, DeliveryError>>,
}

/// How long a delivery may retry after a step stopped by SIGTERM: the
/// grace period is short.
const DELIVERY_AFTER_SIGTERM: Duration = Duration::from_secs(10);

/// The future of one step.
type StepFuture = std::pin::Pin<Box<dyn Future<Output = Result<StepOutput, StepError>> + Send>>;

/// A step ready to run: its name, operation and result target, bounds,
/// dispatch and execution deadlines, and its future.
type Planned = (
    &'static str,
    Option<(OperationRef, Target)>,
    StepBounds,
    Option<Timestamp>,
    Option<Timestamp>,
    StepFuture,
);

/// A source step of an init container: no operation, no deadlines of a claim.
fn source_step(step: &'static str, bounds: StepBounds, outcome: StepFuture) -> Planned {
    (step, None, bounds, None, None, outcome)
}

/// A step of an operation container, held to its claim's deadlines.
fn operation_step(step: &'static str, c: &CommonArgs, outcome: StepFuture) -> Planned {
    (
        step,
        Some((operation_ref(c), Target::of(c))),
        c.bounds.clone(),
        c.dispatch_not_after,
        c.execution_not_after,
        outcome,
    )
}

/// Runs the step `command` names, within its deadlines.
pub async fn run_step(command: Command) -> Finished {
    let started = Timestamp::now();
    let name = command.step();
    let (step, operation, bounds, dispatch, execution, outcome): Planned = match command {
        Command::Source(SourceCommand::Check(a)) => {
            source_step(name, a.bounds.clone(), Box::pin(check_snapshot(a)))
        }
        Command::Source(SourceCommand::Fetch(FetchCommand::Git(a))) => {
            source_step(name, a.bounds.clone(), Box::pin(fetch_git(a)))
        }
        Command::Source(SourceCommand::Fetch(FetchCommand::Oci(a))) => {
            source_step(name, a.bounds.clone(), Box::pin(fetch_oci(a)))
        }
        Command::Resolve(ResolveCommand::Git(a)) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(resolve_git(a)))
        }
        Command::Resolve(ResolveCommand::Oci(a)) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(resolve_oci(a)))
        }
        Command::Resolve(ResolveCommand::Flux(a)) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(resolve_flux(a)))
        }
        Command::Verify(VerifyCommand::Oci(a)) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(verify_oci(a)))
        }
        Command::Observe(a) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(observe(a)))
        }
        Command::Plan(a) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(plan(a)))
        }
        Command::History(a) => {
            let c = a.common.clone();
            operation_step(name, &c, Box::pin(history(a)))
        }
        Command::CheckSequence(_) | Command::Await(_) => {
            // `ptah-runner` answers the hook, and waits, before any step runs.
            let step: StepFuture = Box::pin(async {
                Err(StepError::input(
                    "check-sequence and await are not steps: run them as `ptah-runner check-sequence` and `ptah-runner await`",
                ))
            });
            let bounds = StepBounds {
                timeout: Duration::from_secs(60),
                result_file: None,
            };
            source_step(name, bounds, step)
        }
        Command::Apply(a) => {
            let c = a.database.common.clone();
            let (op, target) = (operation_ref(&c), Target::of(&c));
            // A schema plan is fetched and checked before anything else.
            let step: StepFuture = if a.plan_content_digest.is_some() {
                Box::pin(apply_schema(a, op.clone(), target.clone()))
            } else {
                Box::pin(apply_migrations(a))
            };
            (
                name,
                Some((op, target)),
                c.bounds,
                c.dispatch_not_after,
                c.execution_not_after,
                step,
            )
        }
    };
    let result = match dispatch {
        Some(t) if Timestamp::now() > t => Err(StepError::Deadline(format!(
            "started after --dispatch-not-after={t}: nothing was done"
        ))),
        _ => {
            guarded(
                budget(bounds.timeout, execution),
                operation.is_some(),
                outcome,
            )
            .await
        }
    };
    let exit_code = match &result {
        Ok(_) => super::EXIT_OK,
        Err(e) => e.exit_code(),
    };
    let (operation, target) = operation.unzip();
    let document = result_document(step, operation, started, &result);
    let delivery = match target {
        None => None,
        Some(target) => {
            let bound = match result {
                Err(StepError::Terminated) => DELIVERY_AFTER_SIGTERM,
                _ => deliver::MAX_DELIVERY,
            };
            let delivering = tracing::Instrument::instrument(
                deliver::deliver(&target, &document, bound),
                tracing::info_span!("deliver"),
            );
            tokio::pin!(delivering);
            // SIGTERM while delivering leaves the grace period to finish.
            let delivered = tokio::select! {
                r = &mut delivering => r,
                () = sigterm() => tokio::time::timeout(DELIVERY_AFTER_SIGTERM, &mut delivering)
                    .await
                    .unwrap_or(Err(DeliveryError::Terminated)),
            };
            if let Err(e) = &delivered {
                // The termination message stays the fallback; the exit code
                // keeps its meaning.
                eprintln!("ptah-runner: the result was not delivered: {e}");
            }
            Some(delivered)
        }
    };
    Finished {
        document,
        exit_code,
        result_file: bounds.result_file,
        delivery,
    }
}

/// The time left of the step's budget, for one Ptah child.
/// Less than the step's own bound by the grace a child gets after SIGTERM,
/// so that a deadline reaches Ptah as SIGTERM, never as SIGKILL.
fn child_budget(c: &CommonArgs) -> Duration {
    budget(c.bounds.timeout, c.execution_not_after)
        .saturating_sub(super::executor::TERM_GRACE + Duration::from_secs(2))
        .max(Duration::from_secs(1))
}

// ---- the database operations (Ptah) ----

async fn observe(a: DatabaseArgs) -> Result<StepOutput, StepError> {
    let exec = operations::executor(&a.ptah, &a.work_dir)?;
    operations::observe(&a, &exec, child_budget(&a.common)).await
}

async fn plan(a: DatabaseArgs) -> Result<StepOutput, StepError> {
    let exec = operations::executor(&a.ptah, &a.work_dir)?;
    operations::plan(&a, &exec, &a.work_dir, child_budget(&a.common)).await
}

async fn history(a: DatabaseArgs) -> Result<StepOutput, StepError> {
    let exec = operations::executor(&a.ptah, &a.work_dir)?;
    super::history::history(&a, &exec).await
}

async fn apply_migrations(a: ApplyArgs) -> Result<StepOutput, StepError> {
    let exec = operations::executor(&a.database.ptah, &a.database.work_dir)?;
    super::history::run_migrations(&a, &exec).await
}

// ---- apply (schema): the plan's bytes ----

/// A plan fetch that failed, as the step reports it: a plan the receiver
/// could not read back, or bytes over the limit, are refused; a missing
/// input is invalid; anything else could not finish.
fn plan_fetch_error(e: PlanFetchError) -> StepError {
    match &e {
        PlanFetchError::Refused { reason, .. } if reason == REASON_PLAN_REFUSED => {
            StepError::refused("plan", None, e.to_string())
        }
        PlanFetchError::TooLarge { .. } => StepError::refused("planLength", None, e.to_string()),
        PlanFetchError::Setup(DeliveryError::TokenFile { .. } | DeliveryError::CaFile { .. })
        | PlanFetchError::Url
        | PlanFetchError::Pod(_) => StepError::input(e.to_string()),
        _ => StepError::failed(e.to_string()),
    }
}

/// The fetched bytes must be the plan the flags name: its name and
/// fingerprint as the receiver answered them, the declared length, and the
/// SHA-256 of `--plan-content-digest` (declared and computed). Each refusal
/// names the rule and both values.
pub(crate) fn check_plan(
    fetched: &FetchedPlan,
    plan: &str,
    fingerprint: &str,
    content_digest: &str,
) -> Result<(), StepError> {
    if fetched.plan_name.as_deref() != Some(plan) {
        return Err(StepError::refused(
            "plan",
            None,
            format!(
                "the receiver answered plan {:?}, not --plan={plan}",
                fetched.plan_name.as_deref().unwrap_or_default()
            ),
        ));
    }
    if fetched.plan_fingerprint.as_deref() != Some(fingerprint) {
        return Err(StepError::refused(
            "planFingerprint",
            None,
            format!(
                "the receiver answered fingerprint {:?}, not --plan-fingerprint={fingerprint}",
                fetched.plan_fingerprint.as_deref().unwrap_or_default()
            ),
        ));
    }
    let size = fetched.bytes.len() as u64;
    if fetched.content_length.is_some_and(|n| n != size) {
        return Err(StepError::refused(
            "planLength",
            None,
            format!(
                "{size} bytes arrived, {} were declared",
                fetched.content_length.unwrap_or_default()
            ),
        ));
    }
    let found = content_sha256(&fetched.bytes);
    if found != content_digest {
        return Err(StepError::refused(
            "planContentDigest",
            None,
            format!(
                "the plan's {size} bytes have SHA-256 {found}, not --plan-content-digest={content_digest}"
            ),
        ));
    }
    if fetched.sha256.as_deref() != Some(content_digest) {
        return Err(StepError::refused(
            "planContentDigest",
            None,
            format!(
                "the receiver declared {:?}, not --plan-content-digest={content_digest}",
                fetched.sha256.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// Writes the checked bytes where Ptah reads them, then reads them back:
/// what the file holds is what is reported.
fn write_plan(
    work_dir: &Path,
    bytes: &[u8],
    content_digest: &str,
) -> Result<FileResult, StepError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = work_dir.join(PLAN_FILE);
    let io = |what: &str, e: std::io::Error| {
        StepError::failed(format!("{what} {}: {}", path.display(), e.kind()))
    };
    fs::create_dir_all(work_dir).map_err(|e| io("creating the directory of", e))?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| io("opening", e))?;
    file.write_all(bytes).map_err(|e| io("writing", e))?;
    file.sync_all().map_err(|e| io("syncing", e))?;
    drop(file);
    let written = fs::read(&path).map_err(|e| io("reading back", e))?;
    let sha256 = content_sha256(&written);
    if sha256 != content_digest {
        return Err(StepError::failed(format!(
            "{} holds SHA-256 {sha256} after writing, not {content_digest}",
            path.display()
        )));
    }
    Ok(FileResult {
        path: path.display().to_string(),
        size: written.len() as u64,
        sha256,
    })
}

/// A schema plan fetched with the operation's token, checked against the
/// flags, and written where Ptah reads it.
#[derive(Debug)]
struct PlanFile {
    /// The file written (its path absolute), read back and hashed.
    file: FileResult,
    /// Statements in the plan document.
    statements: i32,
}

/// Fetches the plan's bytes with the operation's token, checks them against
/// the flags and writes them for Ptah: nothing else happens before this.
async fn fetch_schema_plan(
    a: &ApplyArgs,
    op: OperationRef,
    target: Target,
) -> Result<PlanFile, StepError> {
    let content_digest = a
        .plan_content_digest
        .clone()
        .ok_or_else(|| StepError::input("--plan-content-digest is required for a schema plan"))?;
    let fetched = deliver::fetch_plan(&target, &op, deliver::MAX_DELIVERY)
        .await
        .map_err(plan_fetch_error)?;
    check_plan(&fetched, &a.plan, &a.plan_fingerprint, &content_digest)?;
    let statements = operations::statement_count(&fetched.bytes)?;
    let work_dir = a.database.work_dir.clone();
    let file = blocking(move || write_plan(&work_dir, &fetched.bytes, &content_digest)).await?;
    Ok(PlanFile { file, statements })
}

/// A schema Apply: the checked plan, then Ptah's Apply of exactly that file.
async fn apply_schema(
    a: ApplyArgs,
    op: OperationRef,
    target: Target,
) -> Result<StepOutput, StepError> {
    let plan = fetch_schema_plan(&a, op, target).await?;
    let exec = operations::executor(&a.database.ptah, &a.database.work_dir)?;
    let path = PathBuf::from(&plan.file.path);
    operations::apply(
        &a,
        &exec,
        &path,
        plan.statements,
        child_budget(&a.database.common),
    )
    .await
}

/// The next SIGTERM (the runner is PID 1: nothing else ends it).
async fn sigterm() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

/// The step within `limit`, ended early by SIGTERM. An operation step
/// forwards SIGTERM to its Ptah child and gets the grace Ptah needs to
/// release its locks before the step is dropped.
async fn guarded(
    limit: Duration,
    operation: bool,
    step: impl Future<Output = Result<StepOutput, StepError>>,
) -> Result<StepOutput, StepError> {
    let term = sigterm();
    let step = tokio::time::timeout(limit, step);
    tokio::pin!(step);
    let deadline = |_| {
        Err(StepError::Deadline(format!(
            "the step did not finish within {}s (--timeout / --execution-not-after)",
            limit.as_secs()
        )))
    };
    tokio::select! {
        r = &mut step => r.unwrap_or_else(deadline),
        () = term => {
            if operation {
                let grace = super::executor::TERM_GRACE + Duration::from_secs(2);
                let _ = tokio::time::timeout(grace, &mut step).await;
            }
            Err(StepError::Terminated)
        }
    }
}

fn operation_ref(c: &CommonArgs) -> OperationRef {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    OperationRef {
        operation_id: c.operation_id.clone(),
        attempt: c.attempt,
        resource: c.resource.clone(),
        resource_uid: c.resource_uid.clone(),
        generation: c.generation,
        input_fingerprint: c.input_fingerprint.clone(),
        pod_name: env("PTAH_POD_NAME"),
        pod_uid: env("PTAH_POD_UID"),
        job_uid: env("PTAH_JOB_UID"),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StepError> + Send + 'static,
) -> Result<T, StepError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StepError::failed(format!("the step's task ended abnormally: {e}")))?
}

fn file_result(e: &manifest::Entry) -> FileResult {
    FileResult {
        path: e.path.clone(),
        size: e.size,
        sha256: format!("sha256:{}", hex_of(&e.sha256)),
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- source check (ConfigMap snapshot) ----

fn check_error(e: CheckError) -> StepError {
    let file = e.path().map(str::to_string);
    match e {
        CheckError::NoManifest => StepError::refused("manifest", file, e.to_string()),
        CheckError::Io { .. } => StepError::failed(e.to_string()),
        CheckError::NotAFile { .. } => StepError::refused("snapshotFiles", file, e.to_string()),
        CheckError::Verify(ref v) => {
            let rule = match v {
                VerifyError::ManifestDigest { .. } => "contentDigest",
                VerifyError::Parse(_) => "manifest",
                VerifyError::Files(_) => "limits",
                VerifyError::Missing { .. }
                | VerifyError::Extra { .. }
                | VerifyError::Size { .. }
                | VerifyError::Hash { .. } => "manifest",
            };
            let file = file.or_else(|| {
                matches!(
                    v,
                    VerifyError::ManifestDigest { .. } | VerifyError::Parse(_)
                )
                .then(|| snapshot::MANIFEST_KEY.to_string())
            });
            StepError::refused(rule, file, e.to_string())
        }
    }
}

async fn check_snapshot(a: CheckArgs) -> Result<StepOutput, StepError> {
    if !a.snapshot.is_dir() {
        return Err(StepError::input(format!(
            "--snapshot={}: not a directory (is the snapshot ConfigMap mounted?)",
            a.snapshot.display()
        )));
    }
    blocking(move || {
        let manifest = snapshot::check_mounted(
            &a.snapshot,
            &a.content_digest,
            &a.out,
            &ManifestLimits::default(),
        )
        .map_err(check_error)?;
        Ok(StepOutput::SnapshotChecked {
            content_digest: a.content_digest,
            files: manifest.entries().iter().map(file_result).collect(),
        })
    })
    .await
}

// ---- Git ----

fn git_options(work_dir: PathBuf) -> git::Options {
    git::Options {
        work_dir,
        ..git::Options::default()
    }
}

fn work_dir() -> PathBuf {
    std::env::temp_dir()
}

fn recorded_ref(full: Option<&str>, commit: &str) -> git::GitRef {
    match full {
        Some(r) => match r.strip_prefix("refs/heads/") {
            Some(b) => git::GitRef::Branch(b.to_string()),
            None => git::GitRef::Tag(r.trim_start_matches("refs/tags/").to_string()),
        },
        None => git::GitRef::Commit(commit.to_string()),
    }
}

fn git_fetch_error(e: git::FetchError) -> StepError {
    use git::FetchError as F;
    match e {
        F::DigestMismatch { .. } => StepError::refused("contentDigest", None, e.to_string()),
        F::Unreachable { .. } | F::NotFetchable { .. } => {
            StepError::refused("reachability", None, e.to_string())
        }
        F::BudgetExhausted { .. } => StepError::refused("fetchBudget", None, e.to_string()),
        F::InvalidCommitId { .. } => StepError::input(e.to_string()),
        F::Read(ref r) => read_error(r, e.to_string()),
        F::Advertise(git::AdvertiseError::Url { .. })
        | F::Advertise(git::AdvertiseError::Credentials { .. }) => StepError::input(e.to_string()),
        F::Advertise(git::AdvertiseError::Transport(git::TransportError::HostKeyNotPinned {
            ..
        })) => StepError::refused("knownHosts", None, e.to_string()),
        F::Fetch(git::FetchStepError::NotShallow { .. }) => {
            StepError::refused("shallowFetch", None, e.to_string())
        }
        F::Fetch(git::FetchStepError::TooManyBytes { .. }) => {
            StepError::refused("fetchBudget", None, e.to_string())
        }
        _ => StepError::failed(e.to_string()),
    }
}

fn read_error(r: &git::ReadError, message: String) -> StepError {
    use git::ReadError as R;
    match r {
        R::Submodule { path } => StepError::refused("submodule", Some(path.clone()), message),
        R::LfsPointer { path } => StepError::refused("lfs", Some(path.clone()), message),
        R::SymlinkEscapes { path, .. }
        | R::SymlinkTarget { path, .. }
        | R::SymlinkInPath { path } => StepError::refused("symlink", Some(path.clone()), message),
        R::FileTooLarge { path, .. } | R::TooDeep { path } => {
            StepError::refused("limits", Some(path.clone()), message)
        }
        R::NotFound { path, .. } => StepError::refused("path", Some(path.clone()), message),
        R::Manifest(_) | R::Path(_) | R::NotUtf8 { .. } => {
            StepError::refused("files", None, message)
        }
        R::MissingCommit { .. } | R::Repository { .. } => StepError::failed(message),
    }
}

/// `dir/rel`, refusing a path that is absolute or climbs out.
fn inside(dir: &Path, rel: &str) -> Result<PathBuf, StepError> {
    let p = Path::new(rel);
    if rel.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(StepError::refused(
            "files",
            Some(rel.to_string()),
            "the path is not a plain relative path",
        ));
    }
    Ok(dir.join(p))
}

fn write_files<'a>(
    out: &Path,
    files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Vec<FileResult>, StepError> {
    let mut written = Vec::new();
    fs::create_dir_all(out)
        .map_err(|e| StepError::failed(format!("--out={}: {e}", out.display())))?;
    for (rel, bytes) in files {
        let to = inside(out, rel)?;
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| StepError::failed(format!("file {rel:?}: {e}")))?;
        }
        fs::write(&to, bytes).map_err(|e| StepError::failed(format!("file {rel:?}: {e}")))?;
        written.push(file_result(&manifest::Entry::of(rel.to_string(), bytes)));
    }
    Ok(written)
}

async fn fetch_git(a: FetchGitArgs) -> Result<StepOutput, StepError> {
    let credentials = git_credentials(a.credentials.as_deref())?;
    let source = git::GitSource {
        url: a.url.clone(),
        git_ref: recorded_ref(a.git_ref.as_deref(), &a.commit),
        path: a.path.clone(),
    };
    let fetched = git::fetch_recorded_async(
        source,
        a.commit.clone(),
        a.content_digest.clone(),
        credentials,
        git_options(work_dir()),
    )
    .await
    .map_err(git_fetch_error)?;
    let out = a.out.clone();
    let files = blocking(move || {
        write_files(
            &out,
            fetched
                .files
                .iter()
                .map(|f| (f.path.as_str(), f.bytes.as_slice())),
        )
        .map(|files| (fetched.resolution, files))
    })
    .await?;
    Ok(StepOutput::GitFetched {
        resolution: files.0,
        files: files.1,
    })
}

fn git_resolve_error(e: git::ResolveError) -> StepError {
    use git::ResolveError as R;
    match e {
        R::RefNotFound { .. } => StepError::refused("ref", None, e.to_string()),
        R::CommitNotAdvertised { .. } | R::CommitRefused { .. } => {
            StepError::refused("reachability", None, e.to_string())
        }
        R::InvalidCommitId { .. } => StepError::input(e.to_string()),
        R::Read(ref r) => read_error(r, e.to_string()),
        R::Advertise(git::AdvertiseError::Url { .. })
        | R::Advertise(git::AdvertiseError::Credentials { .. }) => StepError::input(e.to_string()),
        R::Advertise(git::AdvertiseError::Transport(git::TransportError::HostKeyNotPinned {
            ..
        })) => StepError::refused("knownHosts", None, e.to_string()),
        R::Fetch(git::FetchStepError::NotShallow { .. }) => {
            StepError::refused("shallowFetch", None, e.to_string())
        }
        R::Fetch(git::FetchStepError::TooManyBytes { .. }) => {
            StepError::refused("fetchBudget", None, e.to_string())
        }
        _ => StepError::failed(e.to_string()),
    }
}

/// The rule a source policy refusal names: `rules[<i>] (<kind>.<field>)`.
fn source_policy_rule(r: &Refusal) -> String {
    match r.rule {
        Some(i) => format!("rules[{i}] ({})", r.field),
        None => format!("rules ({})", r.field),
    }
}

fn source_policy_refused(r: Refusal) -> StepError {
    StepError::refused(
        source_policy_rule(&r),
        None,
        format!("the source policy refuses the source: {}", r.reason),
    )
}

/// Reads and parses `--source-policy`: a policy that does not load is
/// refused, naming the field at fault.
fn load_source_policy(path: &Path) -> Result<(SourcePolicy, String), StepError> {
    let bytes = fs::read(path).map_err(|e| {
        StepError::input(format!("--source-policy={}: {}", path.display(), e.kind()))
    })?;
    let policy = SourcePolicy::parse(&bytes).map_err(|e| {
        let rule = match &e {
            PolicyError::Invalid { field, .. } => format!("sourcePolicy.{field}"),
            PolicyError::Version(_) => "sourcePolicy.version".into(),
            _ => "sourcePolicy".into(),
        };
        StepError::refused(
            rule,
            Some(path.display().to_string()),
            format!("the source policy does not load: {e}"),
        )
    })?;
    Ok((policy, policy_digest(&bytes)))
}

/// Checks a commit's selected files against the policy: their total size
/// and their number.
fn check_git_content(policy: &SourcePolicy, files: &[git::SelectedFile]) -> Result<(), StepError> {
    let size: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
    policy
        .check_git_content(size, files.len() as u64)
        .map_err(source_policy_refused)
}

async fn resolve_git(a: ResolveGitArgs) -> Result<StepOutput, StepError> {
    // The policy first: a bad policy, or a URL it refuses, fetches nothing.
    let policy = match &a.source_policy {
        Some(path) => {
            let (policy, digest) = load_source_policy(path)?;
            policy
                .check_git_url(&a.url)
                .map_err(source_policy_refused)?;
            Some((policy, digest))
        }
        None => None,
    };
    let credentials = git_credentials(a.credentials.as_deref())?;
    let git_ref = match (a.branch, a.tag, a.commit) {
        (Some(b), None, None) => git::GitRef::Branch(b),
        (None, Some(t), None) => git::GitRef::Tag(t),
        (None, None, Some(c)) => git::GitRef::Commit(c),
        _ => {
            return Err(StepError::input(
                "exactly one of --branch, --tag or --commit",
            ));
        }
    };
    let source = git::GitSource {
        url: a.url,
        git_ref,
        path: a.path,
    };
    let fetched = git::resolve_async(source, credentials, git_options(work_dir()))
        .await
        .map_err(git_resolve_error)?;
    // Before the commit is reported: a refused commit is never recorded.
    if let Some((policy, _)) = &policy {
        check_git_content(policy, &fetched.files)?;
    }
    Ok(StepOutput::GitResolved {
        resolution: fetched.resolution,
        source_policy_digest: policy.map(|(_, digest)| digest),
    })
}

// ---- OCI ----

fn oci_error(e: oci::OciError) -> StepError {
    use oci::OciError as O;
    match e {
        O::Reference { .. } | O::Credentials(_) | O::CustomCa(_) => StepError::input(e.to_string()),
        O::TooLarge { .. } => StepError::refused("limits", None, e.to_string()),
        O::DigestMismatch { .. } => StepError::refused("digest", None, e.to_string()),
        O::Manifest { .. } => StepError::refused("manifest", None, e.to_string()),
        O::ArtifactType { .. } => StepError::refused("artifactType", None, e.to_string()),
        O::Registry { .. } => StepError::failed(e.to_string()),
    }
}

fn oci_source(reference: &str, registry: &RegistryArgs) -> Result<OciSource, StepError> {
    let parsed: OciReference = reference
        .parse()
        .map_err(|e| StepError::input(format!("--reference: {e}")))?;
    let ca_pem = match &registry.ca_file {
        None => None,
        Some(path) => Some(read_optional(path)?.ok_or_else(|| {
            StepError::input(format!("--ca-file={}: no such file", path.display()))
        })?),
    };
    let env = |k: &str| std::env::var(k).ok();
    let credentials =
        registry_credentials(&parsed.registry, registry.docker_config.as_deref(), &env)?;
    OciSource::new(
        parsed,
        credentials,
        &Transport {
            plain_http: registry.plain_http,
            ca_pem,
        },
        oci::Limits::default(),
    )
    .map_err(oci_error)
}

fn kind_of_resource(common: &CommonArgs) -> ArtifactKind {
    if common.resource.kind == "PtahMigration" {
        ArtifactKind::Migrations
    } else {
        ArtifactKind::Schema
    }
}

async fn fetch_oci(a: FetchOciArgs) -> Result<StepOutput, StepError> {
    let source = oci_source(&a.reference, &a.registry)?;
    let digest = source
        .reference()
        .digest
        .clone()
        .ok_or_else(|| StepError::input("--reference: must be pinned by digest"))?;
    let kind = match a.artifact_kind {
        Some(ArtifactKindArg::Schema) => ArtifactKind::Schema,
        Some(ArtifactKindArg::Migrations) => ArtifactKind::Migrations,
        None => {
            let m = source.fetch_manifest(&digest).await.map_err(oci_error)?;
            match oci::declared_artifact_type(&m.manifest) {
                Some(oci::SCHEMA_ARTIFACT_TYPE) => ArtifactKind::Schema,
                Some(oci::MIGRATIONS_ARTIFACT_TYPE) => ArtifactKind::Migrations,
                other => {
                    return Err(StepError::refused(
                        "artifactType",
                        None,
                        format!(
                            "artifact {digest} declares {}, not a Ptah schema or migrations artifact",
                            other.unwrap_or("no artifact type")
                        ),
                    ));
                }
            }
        }
    };
    let layers = source.fetch(&digest, kind).await.map_err(oci_error)?;
    let out = a.out.clone();
    let described = layers.iter().map(|l| l.layer.clone()).collect();
    blocking(move || {
        write_files(
            &out,
            layers
                .iter()
                .map(|l| (l.layer.title.as_str(), l.bytes.as_slice())),
        )
    })
    .await?;
    Ok(StepOutput::OciFetched {
        reference: source.reference().pinned(&digest).to_string(),
        digest,
        artifact_type: kind.artifact_type().to_string(),
        layers: described,
    })
}

async fn resolve_oci(a: ResolveOciArgs) -> Result<StepOutput, StepError> {
    let source = oci_source(&a.reference, &a.registry)?;
    let resolution = source
        .resolve(kind_of_resource(&a.common))
        .await
        .map_err(oci_error)?;
    Ok(StepOutput::OciResolved { resolution })
}

// ---- Flux ----

/// The largest tarball fetched: a snapshot holds at most a ConfigMap's
/// bytes, and a repository's tarball carries more than the selected path.
const MAX_FLUX_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;

/// A Flux artifact that cannot be read is a failed Resolve (`ResolveFailed`),
/// retried on the artifact the object names then: the message names the
/// object. Bad flags are the Job's input.
fn flux_error(object: &str, e: supplychain::flux::FluxError) -> StepError {
    use supplychain::flux::FluxError as F;
    let message = format!("{object}: {e}");
    match e {
        F::InvalidDigest { .. } | F::InvalidUrl { .. } | F::InvalidPath { .. } => {
            StepError::input(message)
        }
        _ => StepError::failed(message),
    }
}

async fn resolve_flux(a: ResolveFluxArgs) -> Result<StepOutput, StepError> {
    use base64::Engine as _;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| StepError::failed(format!("an HTTP client: {e}")))?;
    let artifact = supplychain::flux::Artifact {
        url: a.url,
        digest: a.artifact_digest,
        revision: a.revision,
    };
    let object = format!("{}/{}", a.flux_kind, a.flux_name);
    let tarball = supplychain::flux::fetch(&client, &artifact, MAX_FLUX_ARTIFACT_BYTES)
        .await
        .map_err(|e| flux_error(&object, e))?;
    let found = supplychain::flux::files_at(&tarball, a.path.as_deref(), &Default::default())
        .map_err(|e| flux_error(&object, e))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(StepOutput::FluxResolved {
        object_uid: a.flux_uid,
        revision: artifact.revision,
        artifact_digest: artifact.digest,
        reference: a.reference,
        content_digest: found.content_digest,
        files: found
            .files
            .iter()
            .map(|(name, bytes)| (name.clone(), b64.encode(bytes)))
            .collect(),
    })
}

async fn verify_oci(a: VerifyOciArgs) -> Result<StepOutput, StepError> {
    let bytes = read_policy(&a.policy)?;
    let policy = CompiledPolicy::parse(&bytes).map_err(|e| {
        StepError::refused(
            "policy",
            Some(a.policy.display().to_string()),
            format!("the verification policy does not parse: {e}"),
        )
    })?;
    let source = oci_source(&a.reference, &a.registry)?;
    let digest = source
        .reference()
        .digest
        .clone()
        .ok_or_else(|| StepError::input("--reference: must be pinned by digest"))?;
    let kind = if a.content_digest.is_some() {
        ArtifactKind::Flux
    } else {
        kind_of_resource(&a.common)
    };
    let evidence = verification::verify(&source, &digest, kind, &policy)
        .await
        .map_err(|f| match f {
            // Display names the rule once: "refused by <rule>: <reason>".
            VerifyFailure::Refused(r) => StepError::refused(r.rule, None, r.reason),
            // A read that failed, retried after failureRetryInterval.
            VerifyFailure::Unavailable(_) => StepError::failed(f.to_string()),
        })?;
    if let Some(served) = &a.content_digest {
        flux_content_matches(&source, &digest, a.path.as_deref(), served).await?;
    }
    Ok(StepOutput::OciVerified {
        reference: source.reference().pinned(&digest).to_string(),
        evidence,
    })
}

/// The signed manifest's layer, read from the registry, gives the files
/// source-controller served: Flux's extraction is checked, not trusted.
async fn flux_content_matches(
    source: &OciSource,
    digest: &str,
    path: Option<&str>,
    served: &str,
) -> Result<(), StepError> {
    let layers = source
        .fetch(digest, ArtifactKind::Flux)
        .await
        .map_err(oci_error)?;
    let tarball = layers
        .first()
        .map(|l| l.bytes.as_slice())
        .unwrap_or_default();
    let found = supplychain::flux::files_at(tarball, path, &Default::default())
        .map_err(|e| StepError::refused("content", None, format!("the signed artifact: {e}")))?;
    if found.content_digest != served {
        return Err(StepError::refused(
            "content",
            None,
            format!(
                "the signed artifact {digest} gives content {} at the path, but source-controller served {served}",
                found.content_digest
            ),
        ));
    }
    Ok(())
}

fn read_policy(path: &Path) -> Result<Vec<u8>, StepError> {
    let bytes = fs::read(path)
        .map_err(|e| StepError::input(format!("--policy={}: {}", path.display(), e.kind())))?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(StepError::input(format!(
            "--policy={}: larger than {MAX_POLICY_BYTES} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[tokio::test]
    async fn a_step_past_its_budget_ends_with_the_deadline() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Err(StepError::failed("unreachable"))
        };
        let err = guarded(Duration::from_millis(50), false, slow)
            .await
            .unwrap_err();
        assert!(matches!(err, StepError::Deadline(_)), "{err:?}");
        assert_eq!(err.exit_code(), super::super::EXIT_DEADLINE);
    }

    #[tokio::test]
    async fn a_step_started_after_its_dispatch_deadline_does_nothing() {
        use clap::Parser;
        const D: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
        let cli = super::super::cli::Cli::try_parse_from([
            "ptah-runner".to_string(),
            "resolve".into(),
            "oci".into(),
            format!("--operation-id={D}"),
            "--attempt=1".into(),
            "--resource=PtahSchema/ns/orders".into(),
            "--resource-uid=u".into(),
            "--generation=1".into(),
            format!("--input-fingerprint={D}"),
            "--result-url=https://r.example/v1/results".into(),
            "--result-token-file=/var/run/ptah/result/token".into(),
            "--dispatch-not-after=2020-01-01T00:00:00Z".into(),
            // Nothing listens here: reaching it would fail, not time out.
            "--reference=oci://127.0.0.1:9/x:v1".into(),
            "--plain-http".into(),
        ])
        .unwrap();
        let finished = run_step(cli.command).await;
        assert_eq!(finished.exit_code, super::super::EXIT_DEADLINE);
        let summary = finished.document.summary().render();
        assert!(summary.contains("DeadlineExceeded"), "{summary}");
        assert!(summary.contains("dispatch-not-after"), "{summary}");
    }

    #[tokio::test]
    async fn a_database_operation_without_its_url_is_refused_naming_the_variable() {
        use clap::Parser;
        const D: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
        let cli = super::super::cli::Cli::try_parse_from([
            "ptah-runner".to_string(),
            "observe".into(),
            format!("--operation-id={D}"),
            "--attempt=1".into(),
            "--resource=PtahSchema/ns/orders".into(),
            "--resource-uid=u".into(),
            "--generation=1".into(),
            format!("--input-fingerprint={D}"),
            "--result-url=https://r.example/v1/results".into(),
            "--result-token-file=/var/run/ptah/result/token".into(),
            "--engine=postgresql".into(),
            "--source=/source".into(),
            "--source-kind=ConfigMap".into(),
            format!("--content-digest={D}"),
            "--connect-timeout=10s".into(),
            "--lock-timeout=30s".into(),
        ])
        .unwrap();
        let finished = run_step(cli.command).await;
        assert_eq!(finished.exit_code, super::super::EXIT_USAGE);
        let summary = finished.document.summary().render();
        assert!(summary.contains("PTAH_DB_URL is not set"), "{summary}");
    }

    #[test]
    fn paths_out_of_the_output_are_refused() {
        let dir = Path::new("/source");
        assert!(inside(dir, "a/b.sql").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./a"] {
            assert!(inside(dir, bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_tampered_snapshot_is_refused_naming_the_file() {
        let files = BTreeMap::from([
            (
                "001_init.sql".to_string(),
                b"CREATE TABLE a (id int);\n".to_vec(),
            ),
            (
                "002_more.sql".to_string(),
                b"CREATE TABLE b (id int);\n".to_vec(),
            ),
        ]);
        let source = snapshot::SourceConfigMap {
            data: files
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
            binary_data: BTreeMap::new(),
        };
        let snap = snapshot::take(&source, &[], "uid", &ManifestLimits::default()).unwrap();
        let mounted = tempfile::tempdir().unwrap();
        for (k, v) in snap.data() {
            fs::write(mounted.path().join(k), v).unwrap();
        }
        let out = tempfile::tempdir().unwrap();
        let args = |out: &Path| CheckArgs {
            snapshot: mounted.path().to_path_buf(),
            content_digest: snap.content_digest.clone(),
            out: out.to_path_buf(),
            bounds: StepBounds {
                timeout: Duration::from_secs(10),
                result_file: None,
            },
        };
        let ok = check_snapshot(args(out.path())).await.unwrap();
        assert!(matches!(ok, StepOutput::SnapshotChecked { ref files, .. } if files.len() == 2));
        assert!(out.path().join("002_more.sql").is_file());

        fs::write(mounted.path().join("002_more.sql"), "DROP TABLE b;\n").unwrap();
        let out2 = tempfile::tempdir().unwrap();
        let err = check_snapshot(args(out2.path())).await.unwrap_err();
        match &err {
            StepError::Refused { file, .. } => assert_eq!(file.as_deref(), Some("002_more.sql")),
            other => panic!("{other:?}"),
        }
        assert!(!out2.path().join("001_init.sql").exists());
    }

    fn resolve_git_cli(url: &str, policy: &Path) -> super::super::cli::Cli {
        use clap::Parser;
        const D: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
        super::super::cli::Cli::try_parse_from([
            "ptah-runner".to_string(),
            "resolve".into(),
            "git".into(),
            format!("--operation-id={D}"),
            "--attempt=1".into(),
            "--resource=PtahSchema/ns/orders".into(),
            "--resource-uid=u".into(),
            "--generation=1".into(),
            format!("--input-fingerprint={D}"),
            "--result-url=https://r.example/v1/results".into(),
            "--result-token-file=/var/run/ptah/result/token".into(),
            format!("--url={url}"),
            "--branch=main".into(),
            format!("--source-policy={}", policy.display()),
        ])
        .unwrap()
    }

    #[tokio::test]
    async fn a_host_the_source_policy_refuses_is_refused_before_any_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        fs::write(
            &policy,
            "version: 1\nrules:\n  - git:\n      hosts: [\"git.example.com\"]\n",
        )
        .unwrap();
        // An address nothing listens on: the refusal comes before any fetch.
        let cli = resolve_git_cli("https://127.0.0.1:1/shop/schema.git", &policy);
        let finished = run_step(cli.command).await;
        assert_eq!(finished.exit_code, super::super::EXIT_REFUSED);
        let summary: serde_json::Value =
            serde_json::from_str(&finished.document.summary().render()).unwrap();
        assert_eq!(summary["outcome"], "Refused", "{summary}");
        assert_eq!(summary["rule"], "rules[0] (git.hosts)", "{summary}");
        assert!(
            summary.get("commit").is_none_or(|c| c.is_null()),
            "{summary}"
        );
    }

    #[tokio::test]
    async fn a_bad_source_policy_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        fs::write(
            &policy,
            "version: 1\nrules:\n  - git:\n      schemes: [\"ftp\"]\n",
        )
        .unwrap();
        let cli = resolve_git_cli("https://git.example.com/shop/schema.git", &policy);
        let finished = run_step(cli.command).await;
        assert_eq!(finished.exit_code, super::super::EXIT_REFUSED);
        let summary: serde_json::Value =
            serde_json::from_str(&finished.document.summary().render()).unwrap();
        assert_eq!(
            summary["rule"], "sourcePolicy.rules[0].git.schemes[0]",
            "{summary}"
        );
    }

    #[test]
    fn selected_files_over_a_git_limit_are_refused_naming_the_rule() {
        let policy = SourcePolicy::parse(
            b"version: 1\nrules:\n  - git:\n      maxContentSize: 10\n  - git:\n      maxFiles: 1\n",
        )
        .unwrap();
        let file = |p: &str, n: usize| git::SelectedFile {
            path: p.into(),
            bytes: vec![b'x'; n],
        };
        assert!(check_git_content(&policy, &[file("a.sql", 10)]).is_ok());
        match check_git_content(&policy, &[file("a.sql", 11)]).unwrap_err() {
            StepError::Refused { rule, reason, .. } => {
                assert_eq!(rule, "rules[0] (git.maxContentSize)");
                assert!(reason.contains("11 bytes"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match check_git_content(&policy, &[file("a.sql", 1), file("b.sql", 1)]).unwrap_err() {
            StepError::Refused { rule, .. } => assert_eq!(rule, "rules[1] (git.maxFiles)"),
            other => panic!("{other:?}"),
        }
    }

    const PLAN_D: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
    const PLAN_SQL: &[u8] = br#"{
  "format_version": 1,
  "name": "plan_0123456789ab",
  "dialect": "postgres",
  "from_fingerprint": "sha256:1111111111111111111111111111111111111111111111111111111111111111",
  "to_fingerprint": "sha256:2222222222222222222222222222222222222222222222222222222222222222",
  "destructive": false,
  "statements": [{"sql": "ALTER TABLE orders ADD COLUMN note text", "severity": "safe", "reason": ""}]
}
"#;

    fn fetched(bytes: &[u8]) -> FetchedPlan {
        FetchedPlan {
            bytes: bytes.to_vec(),
            content_length: Some(bytes.len() as u64),
            sha256: Some(content_sha256(bytes)),
            plan_name: Some("orders-0123456789ab".into()),
            plan_fingerprint: Some(PLAN_D.into()),
        }
    }

    fn rule_of(e: &StepError) -> &str {
        match e {
            StepError::Refused { rule, .. } => rule,
            other => panic!("not a refusal: {other}"),
        }
    }

    #[test]
    fn fetched_plan_bytes_must_be_the_flags_plan() {
        let digest = content_sha256(PLAN_SQL);
        let check = |f: &FetchedPlan| check_plan(f, "orders-0123456789ab", PLAN_D, &digest);
        assert!(check(&fetched(PLAN_SQL)).is_ok());

        let e = check(&fetched(b"DROP TABLE orders;\n")).unwrap_err();
        assert_eq!(rule_of(&e), "planContentDigest");
        assert_eq!(e.exit_code(), super::super::EXIT_REFUSED);
        let text = e.to_string();
        assert!(text.contains(&digest), "{text}");
        assert!(
            text.contains(&content_sha256(b"DROP TABLE orders;\n")),
            "{text}"
        );

        let mut f = fetched(PLAN_SQL);
        f.content_length = Some(3);
        assert_eq!(rule_of(&check(&f).unwrap_err()), "planLength");
        let mut f = fetched(PLAN_SQL);
        f.plan_fingerprint = Some(digest.clone());
        assert_eq!(rule_of(&check(&f).unwrap_err()), "planFingerprint");
        let mut f = fetched(PLAN_SQL);
        f.plan_name = None;
        assert_eq!(rule_of(&check(&f).unwrap_err()), "plan");
        let mut f = fetched(PLAN_SQL);
        f.sha256 = None;
        assert_eq!(rule_of(&check(&f).unwrap_err()), "planContentDigest");
    }

    /// A receiver answering every plan request with `status`, `body` and
    /// the plan headers; the URL of its results path and its CA.
    async fn plan_receiver(status: u16, body: Vec<u8>, sha256: String) -> (String, String) {
        use crate::protocol::receiver::{
            CONTENT_SHA256_HEADER, PLAN_FINGERPRINT_HEADER, PLAN_NAME_HEADER, PLANS_PATH,
            POD_NAME_HEADER,
        };
        use crate::server::{Handler, Routes, Tls, serve};
        let tls = Tls::self_signed(&["127.0.0.1"]).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handler: Handler = std::sync::Arc::new(move |req| {
            let named = req.headers().get(POD_NAME_HEADER).is_some()
                && req.headers().get("authorization").map(|v| v.as_bytes())
                    == Some(b"Bearer t0ken".as_slice());
            let (body, sha256) = (body.clone(), sha256.clone());
            Box::pin(async move {
                let mut r = http::Response::new(bytes::Bytes::from(body));
                *r.status_mut() =
                    http::StatusCode::from_u16(if named { status } else { 400 }).unwrap();
                let h = r.headers_mut();
                h.insert(CONTENT_SHA256_HEADER, sha256.parse().unwrap());
                h.insert(PLAN_NAME_HEADER, "orders-0123456789ab".parse().unwrap());
                h.insert(PLAN_FINGERPRINT_HEADER, PLAN_D.parse().unwrap());
                r
            })
        });
        let ca = tls.ca_pem.clone();
        tokio::spawn(async move {
            serve(
                listener,
                &tls,
                Routes::new().route(PLANS_PATH, handler),
                1 << 20,
            )
            .await
        });
        (format!("https://127.0.0.1:{port}/v1/results"), ca)
    }

    /// `apply` of a schema plan against `url`, its files under `dir`.
    fn apply_args(
        url: &str,
        ca: &str,
        dir: &Path,
        digest: &str,
    ) -> (ApplyArgs, OperationRef, Target) {
        use clap::Parser;
        std::fs::write(dir.join("token"), "t0ken\n").unwrap();
        std::fs::write(dir.join("ca.pem"), ca).unwrap();
        let cli = super::super::cli::Cli::try_parse_from([
            "ptah-runner".to_string(),
            "apply".into(),
            format!("--operation-id={PLAN_D}"),
            "--attempt=1".into(),
            "--resource=PtahSchema/ns/orders".into(),
            "--resource-uid=u".into(),
            "--generation=1".into(),
            format!("--input-fingerprint={PLAN_D}"),
            format!("--result-url={url}"),
            format!("--result-token-file={}", dir.join("token").display()),
            format!("--result-ca-file={}", dir.join("ca.pem").display()),
            "--engine=postgresql".into(),
            "--source=/source".into(),
            "--source-kind=ConfigMap".into(),
            format!("--content-digest={PLAN_D}"),
            "--connect-timeout=10s".into(),
            "--lock-timeout=30s".into(),
            "--plan=orders-0123456789ab".into(),
            format!("--plan-fingerprint={PLAN_D}"),
            format!("--plan-content-digest={digest}"),
            "--transaction-mode=all".into(),
            format!("--work-dir={}", dir.join("work").display()),
        ])
        .unwrap();
        let super::super::cli::Command::Apply(a) = cli.command else {
            panic!("not apply")
        };
        let c = a.database.common.clone();
        let mut op = operation_ref(&c);
        op.pod_name = Some("ptah-apply-orders-3333333333333333-abcde".into());
        op.pod_uid = Some("pod-uid".into());
        (a, op, Target::of(&c))
    }

    #[tokio::test]
    async fn a_schema_apply_fetches_checks_and_writes_its_plan_before_anything_else() {
        let digest = content_sha256(PLAN_SQL);
        let (url, ca) = plan_receiver(200, PLAN_SQL.to_vec(), digest.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let (a, op, target) = apply_args(&url, &ca, dir.path(), &digest);
        let out = fetch_schema_plan(&a, op, target).await.unwrap();
        let written = dir.path().join("work").join(PLAN_FILE);
        assert_eq!(out.file.path, written.display().to_string());
        assert_eq!(out.file.size, PLAN_SQL.len() as u64);
        assert_eq!(out.file.sha256, digest);
        assert_eq!(out.statements, 1);
        assert_eq!(std::fs::read(&written).unwrap(), PLAN_SQL);
    }

    #[tokio::test]
    async fn other_bytes_are_refused_naming_the_digest_and_nothing_is_written() {
        let digest = content_sha256(PLAN_SQL);
        let other = b"DROP TABLE orders;\n".to_vec();
        let (url, ca) = plan_receiver(200, other.clone(), digest.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let (a, op, target) = apply_args(&url, &ca, dir.path(), &digest);
        let e = fetch_schema_plan(&a, op, target).await.unwrap_err();
        assert_eq!(rule_of(&e), "planContentDigest");
        assert!(e.to_string().contains(&content_sha256(&other)), "{e}");
        assert!(!dir.path().join("work").join(PLAN_FILE).exists());
    }

    #[tokio::test]
    async fn a_plan_the_receiver_could_not_read_back_is_refused_naming_the_chunk() {
        let digest = content_sha256(PLAN_SQL);
        let answer = serde_json::to_vec(&crate::protocol::receiver::Answer {
            reason: REASON_PLAN_REFUSED.into(),
            message:
                "PtahSchemaPlanChunk orders-0123456789ab-001 of plan orders-0123456789ab: altered"
                    .into(),
        })
        .unwrap();
        let (url, ca) = plan_receiver(409, answer, digest.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let (a, op, target) = apply_args(&url, &ca, dir.path(), &digest);
        let e = fetch_schema_plan(&a, op, target).await.unwrap_err();
        assert_eq!(rule_of(&e), "plan");
        assert!(e.to_string().contains("orders-0123456789ab-001"), "{e}");
    }
}
