//! The runner: PID 1 of every operation container and of the source init
//! containers. It runs exactly one step and delivers one result; the command
//! lines, result documents and exit codes are documented in
//! [`ptah_operator::runner`].
use std::io::Write;

use clap::Parser;
use clap::error::ErrorKind;
use ptah_operator::protocol::result::{Outcome, Summary};
use ptah_operator::runner::cli::{Cli, Command};
use ptah_operator::runner::history;
use ptah_operator::runner::{self, EXIT_FAILED, EXIT_USAGE};
use ptah_operator::telemetry::runner::RunnerTrace;
use tracing_opentelemetry::OpenTelemetrySpanExt;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                e.exit();
            }
            // The termination message says which flag was refused, so the
            // Pod's status shows it without its log.
            let path = termination_path_from_args();
            let message = usage_message(&e);
            runner::write_summary(
                &path,
                &Summary {
                    outcome: Outcome::InvalidInput,
                    step: "arguments",
                    digest: None,
                    commit: None,
                    rule: None,
                    file: None,
                    message: Some(message.trim_end().to_string()),
                },
            );
            eprintln!("{message}");
            std::process::exit(EXIT_USAGE);
        }
    };
    // Ptah's pre-up hook runs inside the Apply container: it answers with its
    // exit code alone, and must not overwrite the Apply's summary.
    if let Command::CheckSequence(a) = &cli.command {
        std::process::exit(history::check_sequence_from_env(
            &a.source,
            &a.sequence_digest,
        ));
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let termination_log = cli.termination_log.clone();
    if let Command::Await(a) = &cli.command {
        let rt = runtime(tokio::runtime::Builder::new_current_thread());
        let (code, sentence) = rt.block_on(runner::awaiting::run(a));
        if code != runner::EXIT_OK {
            eprintln!("ptah-runner await: {sentence}");
        }
        runner::write_termination_message(&termination_log, &sentence);
        std::process::exit(code);
    }
    let rt = runtime({
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    });
    let started = std::time::Instant::now();
    // Spans only when the Job carries a trace context and an endpoint.
    let trace = RunnerTrace::start();
    let span = tracing::info_span!(
        "runner",
        "otel.name" = cli.command.step(),
        "ptah.step" = cli.command.step(),
        "ptah.outcome" = tracing::field::Empty,
        "otel.status_code" = tracing::field::Empty,
    );
    if let Some(t) = &trace {
        let _ = span.set_parent(t.parent.clone());
    }
    let finished = rt.block_on(tracing::Instrument::instrument(
        runner::run_step(cli.command),
        span.clone(),
    ));
    span.record(
        "ptah.outcome",
        format!("{:?}", finished.document.outcome).as_str(),
    );
    if finished.exit_code != runner::EXIT_OK {
        span.record("otel.status_code", "ERROR");
    }
    drop(span);
    // The runner's own cost beyond Ptah's run time: spawn, parse, check and
    // deliver (`conformance/bench/runner-overhead.sh` reads this line).
    let child = runner::executor::child_time();
    let total = started.elapsed();
    if !child.is_zero() {
        eprintln!(
            "ptah-runner: timing step={} total_ms={} ptah_ms={} runner_ms={}",
            finished.document.step,
            total.as_millis(),
            child.as_millis(),
            total.saturating_sub(child).as_millis()
        );
    }
    // A step stopped at its deadline may leave a blocking fetch behind: do
    // not wait for it.
    rt.shutdown_background();

    let document = serde_json::to_string_pretty(&finished.document).unwrap_or_default();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{document}");
        let _ = out.flush();
    }
    if let Some(path) = &finished.result_file
        && let Err(e) = std::fs::write(path, &document)
    {
        eprintln!(
            "ptah-runner: cannot write the result to {}: {e}",
            path.display()
        );
    }
    if let Some(error) = &finished.document.error {
        eprintln!("ptah-runner: {}: {}", finished.document.step, error.message);
    }
    runner::write_summary(&termination_log, &finished.document.summary());
    if let Some(t) = trace {
        t.finish(&finished.document);
    }
    std::process::exit(finished.exit_code);
}

/// The runtime `builder` makes, or the exit it cannot.
fn runtime(mut builder: tokio::runtime::Builder) -> tokio::runtime::Runtime {
    match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ptah-runner: cannot start the runtime: {e}");
            std::process::exit(EXIT_FAILED);
        }
    }
}

/// `--termination-log=` when given (hidden; tests), else the kubelet's default.
fn termination_path_from_args() -> std::path::PathBuf {
    std::env::args()
        .find_map(|a| a.strip_prefix("--termination-log=").map(Into::into))
        .unwrap_or_else(|| "/dev/termination-log".into())
}

/// clap's refusal without the refused value where clap would echo it (a
/// URL given with credentials must not print them), and with any
/// `scheme://user:password@` scrubbed from what is left.
fn usage_message(e: &clap::Error) -> String {
    use clap::error::ContextKind;
    let text = if e.kind() == ErrorKind::ValueValidation {
        let arg = e
            .get(ContextKind::InvalidArg)
            .map(|a| a.to_string())
            .unwrap_or_else(|| "an argument".into());
        let why = std::error::Error::source(e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "invalid".into());
        format!("error: invalid value for '{arg}': {why}")
    } else {
        e.render().to_string()
    };
    runner::redact::userinfo(text.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_scrubbed() {
        assert_eq!(
            runner::redact::userinfo("bad 'https://u:s3cret@git.example/x.git' and git://h/x"),
            "bad 'https://u:***@git.example/x.git' and git://h/x"
        );
    }

    #[test]
    fn a_refused_url_is_not_echoed() {
        let e = Cli::try_parse_from([
            "ptah-runner",
            "source",
            "fetch",
            "git",
            "--url=https://u:s3cret@git.example/x.git",
            "--commit=0123456789abcdef0123456789abcdef01234567",
            "--content-digest=sha256:3333333333333333333333333333333333333333333333333333333333333333",
            "--out=/source",
        ])
        .unwrap_err();
        let m = usage_message(&e);
        assert!(m.contains("--url"), "{m}");
        assert!(!m.contains("s3cret"), "{m}");
    }
}
