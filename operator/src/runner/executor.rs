//! The Ptah CLI as the runner's child: argv only (no shell), only the
//! environment Ptah needs, both streams captured and bounded, a deadline,
//! and SIGTERM forwarded so that Ptah releases its locks before it ends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::StepError;

/// Where the executor image keeps Ptah.
pub const PTAH_PATH: &str = "/usr/local/bin/ptah";
/// The most of each stream kept: a plan is at most 8 MiB, and its document
/// carries some JSON around the statements.
pub const MAX_STREAM: usize = 12 * 1024 * 1024;
/// How long Ptah gets after SIGTERM to release its locks.
pub const TERM_GRACE: Duration = Duration::from_secs(20);
/// The variable that holds the database URL, in the runner's environment
/// and in Ptah's (its flag twin of `--db-url`).
pub const DB_URL_ENV: &str = "PTAH_DB_URL";

/// Microseconds the Ptah children of this process ran, all told: what the
/// runner spent beyond them is its own cost (one process runs one step).
static CHILD_MICROS: AtomicU64 = AtomicU64::new(0);

/// How long this process's Ptah children ran, all told.
pub fn child_time() -> Duration {
    Duration::from_micros(CHILD_MICROS.load(Ordering::Relaxed))
}

/// What one run of the child left.
#[derive(Debug, Clone)]
pub struct ChildRun {
    /// Its exit code; `-1` when a signal ended it.
    pub exit: i32,
    /// Its stdout, at most `limit` bytes.
    pub stdout: Vec<u8>,
    /// Its stderr, at most `limit` bytes.
    pub stderr: Vec<u8>,
    /// stdout went past `limit`.
    pub stdout_truncated: bool,
    /// stderr went past `limit`.
    pub stderr_truncated: bool,
    /// The bound of each stream.
    pub limit: usize,
    /// How long the child ran.
    pub elapsed: Duration,
}

/// How the runner starts Ptah.
#[derive(Debug, Clone)]
pub struct Executor {
    /// The binary.
    pub program: PathBuf,
    /// The child's working directory: empty, so no `ptah.yaml` is loaded.
    pub work_dir: PathBuf,
    /// The child's whole environment.
    pub env: Vec<(String, String)>,
    /// The bound of each stream.
    pub limit: usize,
}

impl Executor {
    /// Ptah at `program`, run in `work_dir` with the database URL of the
    /// runner's own `PTAH_DB_URL` and nothing else of its environment.
    pub fn from_env(program: &Path, work_dir: &Path) -> Result<Self, StepError> {
        let url = std::env::var(DB_URL_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| {
                StepError::input(format!(
                    "{DB_URL_ENV} is not set: the Job gives it from spec.target.urlFrom"
                ))
            })?;
        super::redact::remember_url(&url);
        let mut exec = Self::new(program, work_dir, url);
        exec.env.extend(trace_env(|k| {
            std::env::var(k).ok().filter(|v| !v.is_empty())
        }));
        Ok(exec)
    }

    /// Ptah at `program`, run in `work_dir` with `url` as its database and
    /// nothing else but `PATH`, `HOME` (the work dir) and `TZ`.
    pub fn new(program: &Path, work_dir: &Path, url: String) -> Self {
        Self {
            program: program.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
            env: vec![
                (DB_URL_ENV.into(), url),
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                ("HOME".into(), work_dir.display().to_string()),
                ("TZ".into(), "UTC".into()),
            ],
            limit: MAX_STREAM,
        }
    }

    /// The database URL the child gets.
    pub fn db_url(&self) -> &str {
        self.env
            .iter()
            .find(|(k, _)| k == DB_URL_ENV)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }

    /// Runs `ptah <args>` to its end, within `limit`. A deadline or SIGTERM
    /// sends SIGTERM to the child and waits [`TERM_GRACE`] before killing it.
    pub async fn run(&self, args: &[String], limit: Duration) -> Result<ChildRun, StepError> {
        use tracing::Instrument;
        // The command's words only: URLs and credentials never reach argv.
        let command: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .take_while(|a| !a.starts_with('-'))
            .take(3)
            .collect();
        let span = tracing::info_span!(
            "ptah",
            "ptah.command" = %command.join(" "),
            "process.exit.code" = tracing::field::Empty,
            "ptah.duration_ms" = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
        );
        let run = self.run_child(args, limit).instrument(span.clone()).await;
        match &run {
            Ok(child) => {
                span.record("process.exit.code", child.exit);
                span.record("ptah.duration_ms", child.elapsed.as_millis() as u64);
                if child.exit != 0 {
                    span.record("otel.status_code", "ERROR");
                }
            }
            Err(_) => {
                span.record("otel.status_code", "ERROR");
            }
        }
        run
    }

    async fn run_child(&self, args: &[String], limit: Duration) -> Result<ChildRun, StepError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let started = Instant::now();
        let _spent = Spent(started);
        let mut child = cmd.spawn().map_err(|e| {
            StepError::failed(format!(
                "cannot start {}: {}",
                self.program.display(),
                e.kind()
            ))
        })?;
        let pid = child.id();
        let stdout = child
            .stdout
            .take()
            .map(|s| tokio::spawn(bounded(s, self.limit)));
        let stderr = child
            .stderr
            .take()
            .map(|s| tokio::spawn(bounded(s, self.limit)));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| StepError::failed(format!("cannot listen for SIGTERM: {e}")))?;
        let ended = tokio::select! {
            status = child.wait() => Ok(status),
            () = tokio::time::sleep(limit) => Err(StepError::Deadline(format!(
                "ptah {} did not finish within {}s",
                args.first().map(String::as_str).unwrap_or_default(),
                limit.as_secs()
            ))),
            _ = term.recv() => Err(StepError::Terminated),
        };
        let status = match ended {
            Ok(status) => status,
            Err(e) => {
                // Ptah releases its locks on SIGTERM; give it the time to.
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
                if tokio::time::timeout(TERM_GRACE, child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
                return Err(e);
            }
        }
        .map_err(|e| StepError::failed(format!("waiting for ptah: {}", e.kind())))?;
        let take = |h: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>| async move {
            match h {
                Some(h) => h.await.unwrap_or_default(),
                None => (Vec::new(), false),
            }
        };
        let (stdout, stdout_truncated) = take(stdout).await;
        let (stderr, stderr_truncated) = take(stderr).await;
        Ok(ChildRun {
            exit: status.code().unwrap_or(-1),
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            limit: self.limit,
            elapsed: started.elapsed(),
        })
    }
}

/// What a traced Job passes on to Ptah: where spans go and the context
/// they belong to, so a Ptah built with its `observability` tag exports its
/// own spans beside the runner's, carrying the operation id.
pub const TRACE_ENV: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "TRACEPARENT",
    "TRACESTATE",
];

/// The [`TRACE_ENV`] variables `env` has, when it has a trace context.
pub fn trace_env(env: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    if env("TRACEPARENT").is_none() {
        return Vec::new();
    }
    TRACE_ENV
        .iter()
        .filter_map(|k| env(k).map(|v| (k.to_string(), v)))
        .collect()
}

/// Adds the child's time to [`CHILD_MICROS`] however its run ends.
struct Spent(Instant);

impl Drop for Spent {
    fn drop(&mut self) {
        let micros = u64::try_from(self.0.elapsed().as_micros()).unwrap_or(u64::MAX);
        CHILD_MICROS.fetch_add(micros, Ordering::Relaxed);
    }
}

/// Reads `stream` to its end, keeping at most `limit` bytes: the child is
/// never blocked on a full pipe, and what is past the bound is dropped.
async fn bounded(mut stream: impl AsyncRead + Unpin, limit: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut truncated = false;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
    (kept, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(work: &Path) -> Executor {
        Executor {
            program: PathBuf::from("/bin/sh"),
            work_dir: work.to_path_buf(),
            env: vec![(DB_URL_ENV.into(), "postgres://u:p@h/d".into())],
            limit: 16,
        }
    }

    #[test]
    fn ptah_gets_the_trace_context_and_nothing_else_of_it() {
        let env = |k: &str| match k {
            "TRACEPARENT" => Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4318".into()),
            "OTEL_RESOURCE_ATTRIBUTES" => Some("ptah.operation.id=sha256:ab".into()),
            "OTEL_EXPORTER_OTLP_HEADERS" => Some("authorization=secret".into()),
            _ => None,
        };
        let got: Vec<String> = trace_env(env).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            got,
            [
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_RESOURCE_ATTRIBUTES",
                "TRACEPARENT"
            ]
        );
        // An untraced Job passes on nothing.
        assert!(trace_env(|k| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "x".into())).is_empty());
    }

    #[tokio::test]
    async fn streams_are_captured_apart_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let run = sh(dir.path())
            .run(
                &[
                    "-c".into(),
                    "echo out; echo err >&2; head -c 100 /dev/zero; exit 1".into(),
                ],
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(run.exit, 1);
        assert_eq!(run.stderr, b"err\n");
        assert_eq!(run.stdout.len(), 16);
        assert!(run.stdout_truncated);
        assert!(!run.stderr_truncated);
    }

    #[tokio::test]
    async fn the_child_sees_only_the_environment_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        // cargo gives every test process CARGO_* variables; none may reach
        // the child.
        assert!(std::env::vars().any(|(k, _)| k.starts_with("CARGO")));
        let mut e = sh(dir.path());
        e.limit = 4096;
        let run = e
            .run(&["-c".into(), "env | sort".into()], Duration::from_secs(10))
            .await
            .unwrap();
        let env = String::from_utf8(run.stdout).unwrap();
        assert!(env.contains("PTAH_DB_URL="), "{env}");
        assert!(!env.contains("CARGO"), "{env}");
    }

    #[tokio::test]
    async fn a_deadline_reaches_the_child_as_sigterm_so_it_can_release_its_locks() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("released");
        let script = format!(
            "trap 'echo released > {}; exit 143' TERM; sleep 30 & wait",
            mark.display()
        );
        let e = sh(dir.path())
            .run(&["-c".into(), script], Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, StepError::Deadline(_)), "{e}");
        assert_eq!(std::fs::read_to_string(&mark).unwrap(), "released\n");
    }

    #[tokio::test]
    async fn a_deadline_ends_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let e = sh(dir.path())
            .run(
                &["-c".into(), "sleep 30".into()],
                Duration::from_millis(200),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, StepError::Deadline(_)), "{e}");
    }
}
