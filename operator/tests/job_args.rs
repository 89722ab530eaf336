//! The Job builder and the runner speak one command line
//! (`ptah_operator::protocol::args`): every runner line of every Job the
//! builder makes, and of every checked-in golden Job, parses with the
//! runner's own parser (`ptah_operator::runner::cli::Cli`), and the parsed
//! values are the ones the Job was built from.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Parser;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Container;

use ptah_operator::api::status::OperationType;
use ptah_operator::execution::examples;
use ptah_operator::execution::job::{
    ApplyInput, JobInput, OPERATION_CONTAINER, OwnerKind, RUNNER_PATH, SOURCE_CONTAINER,
    SourceInput, build_job,
};
use ptah_operator::protocol::args::{EngineArg, ResourceRef, SourceKindArg, TransactionModeArg};
use ptah_operator::runner::cli::{
    ApplyArgs, Cli, Command, CommonArgs, DatabaseArgs, FetchCommand, ResolveCommand, SourceCommand,
    VerifyCommand,
};

/// The namespace the goldens are rendered in (`job_golden.rs`).
const NAMESPACE: &str = "shop";

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/jobs")
}

fn containers(job: &Job) -> Vec<Container> {
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    pod.init_containers
        .iter()
        .flatten()
        .chain(pod.containers.iter())
        .cloned()
        .collect()
}

/// The container's line through the runner's parser, as the kubelet would
/// start it: `command` is the runner, `args` its argv.
fn parse(stem: &str, c: &Container) -> Cli {
    assert_eq!(
        c.command.as_deref(),
        Some([RUNNER_PATH.to_string()].as_slice()),
        "{stem}/{}: the container runs the runner",
        c.name
    );
    let args = c.args.clone().unwrap_or_default();
    Cli::try_parse_from(std::iter::once("ptah-runner".to_string()).chain(args.iter().cloned()))
        .unwrap_or_else(|e| panic!("{stem}/{}: {args:?}: {e}", c.name))
}

/// The content digest the source init container checks.
fn source_digest(source: &SourceInput) -> String {
    match source {
        SourceInput::ConfigMap { content_digest, .. } => content_digest.clone(),
        SourceInput::Git(g) => g.content_digest.clone().expect("a fetched commit's digest"),
        SourceInput::Oci(o) => o
            .reference
            .rsplit_once('@')
            .map(|(_, d)| d.to_string())
            .expect("a pinned reference"),
        // Resolve alone reads a Flux source, which has no source step.
        SourceInput::Flux(f) => f.artifact.as_ref().expect("an artifact").digest.clone(),
    }
}

fn source_kind(source: &SourceInput) -> SourceKindArg {
    match source {
        SourceInput::ConfigMap { .. } => SourceKindArg::ConfigMap,
        SourceInput::Git(_) => SourceKindArg::Git,
        SourceInput::Oci(_) => SourceKindArg::Oci,
        SourceInput::Flux(_) => SourceKindArg::Flux,
    }
}

/// The source init container's step checks or fetches exactly the input's
/// source.
fn check_source_step(stem: &str, input: &JobInput, cli: Cli) {
    let Command::Source(step) = cli.command else {
        panic!("{stem}: the source container runs a source step");
    };
    match (step, &input.source) {
        (SourceCommand::Check(a), SourceInput::ConfigMap { content_digest, .. }) => {
            assert_eq!(&a.content_digest, content_digest, "{stem}");
        }
        (SourceCommand::Fetch(FetchCommand::Git(a)), SourceInput::Git(g)) => {
            assert_eq!(Some(&a.commit), g.commit.as_ref(), "{stem}");
            assert_eq!(a.url, g.url, "{stem}");
            assert_eq!(Some(&a.content_digest), g.content_digest.as_ref(), "{stem}");
        }
        (SourceCommand::Fetch(FetchCommand::Oci(a)), SourceInput::Oci(o)) => {
            assert_eq!(a.reference, o.reference, "{stem}");
        }
        (step, _) => panic!("{stem}: {step:?} is not the step of its source"),
    }
}

/// The claim and the result delivery, as the operation container parsed them.
fn check_common(stem: &str, input: &JobInput, c: &CommonArgs) {
    let kind = match input.owner.kind {
        OwnerKind::PtahSchema => "PtahSchema",
        OwnerKind::PtahMigration => "PtahMigration",
    };
    assert_eq!(c.operation_id, input.claim.operation_id, "{stem}");
    assert_eq!(c.attempt, input.claim.attempt, "{stem}");
    assert_eq!(
        c.resource,
        ResourceRef {
            kind: kind.into(),
            namespace: input.owner.namespace.clone(),
            name: input.owner.name.clone(),
        },
        "{stem}"
    );
    assert_eq!(c.resource_uid, input.owner.uid, "{stem}");
    assert_eq!(c.generation, input.owner.generation, "{stem}");
    assert_eq!(c.input_fingerprint, input.claim.input_fingerprint, "{stem}");
    assert_eq!(c.result_url, input.result.receiver_url, "{stem}");
    assert_eq!(
        c.result_ca_file.is_some(),
        input.result.receiver_ca.is_some(),
        "{stem}"
    );
    let instant =
        |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| t.as_ref().map(|t| t.0);
    assert_eq!(
        c.dispatch_not_after,
        instant(&input.claim.dispatch_not_after),
        "{stem}"
    );
    assert_eq!(
        c.execution_not_after,
        instant(&input.claim.execution_not_after),
        "{stem}"
    );
}

/// Engine, source, timeouts of a database operation.
fn check_database(stem: &str, input: &JobInput, d: &DatabaseArgs) {
    check_common(stem, input, &d.common);
    assert_eq!(d.engine, EngineArg::from(input.target.engine), "{stem}");
    assert_eq!(d.source_kind, source_kind(&input.source), "{stem}");
    assert_eq!(d.content_digest, source_digest(&input.source), "{stem}");
    assert_eq!(
        Some(d.connect_timeout),
        input.execution.connect_timeout.to_std().ok(),
        "{stem}"
    );
    assert_eq!(
        Some(d.lock_timeout),
        input.target.lock_timeout.to_std().ok(),
        "{stem}"
    );
    // Only a Plan carries the exclude selectors.
    let exclude: &[String] = if input.operation == OperationType::Plan {
        &input.target.exclude
    } else {
        &[]
    };
    assert_eq!(d.exclude, exclude, "{stem}");
}

/// The plan an Apply runs.
fn check_apply(stem: &str, input: &JobInput, a: &ApplyArgs) {
    check_database(stem, input, &a.database);
    match input.apply.as_ref().expect("an Apply input") {
        ApplyInput::Schema {
            plan_name,
            plan_fingerprint,
            content_digest,
            transaction_mode,
        } => {
            assert_eq!(&a.plan, plan_name, "{stem}");
            assert_eq!(&a.plan_fingerprint, plan_fingerprint, "{stem}");
            assert_eq!(
                a.plan_content_digest.as_ref(),
                Some(content_digest),
                "{stem}"
            );
            assert_eq!(a.sequence_digest, None, "{stem}");
            assert_eq!(
                a.transaction_mode,
                Some(TransactionModeArg::from(*transaction_mode)),
                "{stem}"
            );
        }
        ApplyInput::Migration {
            plan_name,
            plan_fingerprint,
            sequence_digest,
            transaction_mode,
        } => {
            assert_eq!(&a.plan, plan_name, "{stem}");
            assert_eq!(&a.plan_fingerprint, plan_fingerprint, "{stem}");
            assert_eq!(a.sequence_digest.as_ref(), Some(sequence_digest), "{stem}");
            assert_eq!(a.plan_content_digest, None, "{stem}");
            assert_eq!(
                a.transaction_mode,
                transaction_mode.map(TransactionModeArg::from),
                "{stem}"
            );
        }
    }
}

/// The operation container runs the input's operation, for its claim.
fn check_operation_step(stem: &str, input: &JobInput, cli: Cli) {
    match (input.operation, &cli.command) {
        (OperationType::Resolve, Command::Resolve(ResolveCommand::Git(a))) => {
            check_common(stem, input, &a.common);
            let SourceInput::Git(g) = &input.source else {
                panic!("{stem}: resolve git of another source");
            };
            assert_eq!(a.url, g.url, "{stem}");
            assert_eq!(a.branch, g.git_ref.branch, "{stem}");
            assert_eq!(a.tag, g.git_ref.tag, "{stem}");
            assert_eq!(a.commit, g.git_ref.commit, "{stem}");
        }
        (OperationType::Resolve, Command::Resolve(ResolveCommand::Oci(a))) => {
            check_common(stem, input, &a.common);
            let SourceInput::Oci(o) = &input.source else {
                panic!("{stem}: resolve oci of another source");
            };
            assert_eq!(a.reference, o.reference, "{stem}");
        }
        (OperationType::Resolve, Command::Resolve(ResolveCommand::Flux(a))) => {
            check_common(stem, input, &a.common);
            let SourceInput::Flux(f) = &input.source else {
                panic!("{stem}: resolve flux of another source");
            };
            let artifact = f.artifact.as_ref().expect("an artifact");
            assert_eq!(a.flux_kind, f.kind.as_str(), "{stem}");
            assert_eq!(a.flux_name, f.name, "{stem}");
            assert_eq!(a.flux_uid, artifact.uid, "{stem}");
            assert_eq!(a.url, artifact.url, "{stem}");
            assert_eq!(a.artifact_digest, artifact.digest, "{stem}");
            assert_eq!(a.revision, artifact.revision, "{stem}");
            assert_eq!(a.path, f.path, "{stem}");
            assert_eq!(a.reference, artifact.reference, "{stem}");
        }
        (OperationType::Verify, Command::Verify(VerifyCommand::Oci(a))) => {
            check_common(stem, input, &a.common);
            let SourceInput::Oci(o) = &input.source else {
                panic!("{stem}: verify oci of another source");
            };
            assert_eq!(a.reference, o.reference, "{stem}");
            let flux = o.flux_content.as_ref();
            assert_eq!(
                a.content_digest.as_ref(),
                flux.map(|f| &f.content_digest),
                "{stem}"
            );
            assert_eq!(a.path, flux.and_then(|f| f.path.clone()), "{stem}");
        }
        (OperationType::Observe, Command::Observe(d))
        | (OperationType::Plan, Command::Plan(d))
        | (OperationType::History, Command::History(d)) => check_database(stem, input, d),
        (OperationType::Apply, Command::Apply(a)) => check_apply(stem, input, a),
        (op, command) => panic!("{stem}: {op:?} runs {command:?}"),
    }
}

/// Every checked-in golden Job: each runner line parses with the runner's
/// parser and carries the example's operation id, attempt, resource, engine,
/// source, deadlines and plan.
#[test]
fn every_golden_jobs_runner_lines_parse_with_the_runners_parser_into_their_inputs() {
    let dir = golden_dir();
    let inputs = examples::goldens(NAMESPACE);
    let mut seen = BTreeSet::new();
    let mut lines = 0;
    for (stem, input) in &inputs {
        let path = dir.join(format!("{stem}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let job: Job = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a Job: {e}", path.display()));
        let mut operation = 0;
        for c in containers(&job) {
            let cli = parse(stem, &c);
            match c.name.as_str() {
                SOURCE_CONTAINER => check_source_step(stem, input, cli),
                OPERATION_CONTAINER => {
                    operation += 1;
                    check_operation_step(stem, input, cli);
                }
                other => panic!("{stem}: unexpected container {other}"),
            }
            lines += 1;
        }
        assert_eq!(operation, 1, "{stem}: one operation container");
        seen.insert(format!("{stem}.yaml"));
    }
    // Every golden on disk was read: none is left unparsed.
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("golden dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(seen, on_disk);
    // 23 Jobs; every database operation also has its source init container.
    assert!(lines >= 23 + 14, "{lines}");
}

/// Every command line the Job builder writes, for every example
/// operation and source kind, parses here.
#[test]
fn every_command_line_of_the_job_builder_parses() {
    let mut seen = 0;
    for (stem, input) in examples::goldens("ns") {
        let job = build_job(&input).unwrap();
        let pod = job.spec.unwrap().template.spec.unwrap();
        for c in pod.init_containers.iter().flatten().chain(&pod.containers) {
            let args = c.args.clone().unwrap_or_default();
            let parsed = Cli::try_parse_from(
                std::iter::once("ptah-runner".to_string()).chain(args.iter().cloned()),
            );
            assert!(
                parsed.is_ok(),
                "{stem}/{}: {args:?}: {:?}",
                c.name,
                parsed.err()
            );
            seen += 1;
        }
    }
    assert!(seen >= 22, "{seen}");
}
